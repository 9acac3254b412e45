"""The secrets on the converged one-host sim: the Hugging Face token and the router's API key, each a distinctive
canary value, reach the tasks that carry them (the model role's hub download from a test hub endpoint on the
sim bridge, tests/model/hubserver.py; `router.api_key: true` with the key in pdfleet_units_secrets), in one
site.yml run at -vvv whose final play verifies the cluster with the key on. Neither value may appear in:

- the playbook's -vvv output;
- any file on the host outside the one place the key belongs (the router unit's own
  /etc/pdfleet/pdfleet-router-secrets.env: mode 0600, root:root):
  the rendered units and their environment files, Prometheus' configuration and data, the model directory,
  /tmp (the token's private directory is gone);
- the host's whole journal (every field, -o verbose: command lines of the module runs included);
- the verification reports and journal dumps under the reports directory;
- Prometheus' labels (every series) and the text of every target it scrapes;
- `ps -eww -o args` on the host (sampled on the host for the whole run; the hub holds a weight file until the
  sampler has seen `hf download` running) and on the control machine (the verification and drain run there).

Each source is also checked to hold what it should (the key in secrets.env, the download in `ps`, module runs
in the journal, a passing report, scraped targets), so a check that reads nothing fails instead of passing.
- the environment of the worker processes (they never read the gateway's key).

The router refuses GET and POST /workers without the key (nobody on the network can add a worker of theirs) and
answers with it. The cluster is put back after (the inventory's own key, the stand-in model) by site.yml, so later
tests find it as converged.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from model.hubserver import HubRepo, HubServer, serve
from model.test_hub import BIG, MIB, REPO_ID, _repo_files
from simcluster import SITE, ScratchCluster, wait_for

pytestmark = [pytest.mark.sim, pytest.mark.mutates]

# New values for every test session: what an earlier run (or a deliberately broken one) left behind is not
# mistaken for a leak of this run, nor hides one.
HF_CANARY = "hf_CANARYpdfleet" + secrets.token_hex(10)
KEY_CANARY = "pdfleetROUTERkeyCANARY" + secrets.token_hex(10)
CANARIES = {"the HF token": HF_CANARY, "the router API key": KEY_CANARY}
SECRETS_ENV = "/etc/pdfleet/pdfleet-router-secrets.env"  # the router unit's own; workers read none
# Searched on the host for the canaries (grep reads the patterns from standard input: never on its command line).
HOST_DIRS = ("/etc", "/srv", "/opt/pdfleet", "/var/lib", "/var/log", "/var/tmp", "/tmp", "/root", "/home", "/run")
SAMPLER = "/root/pdfleet-secrets-ps.py"
SEEN = "/root/pdfleet-secrets-ps.txt"
# Runs on the host: every distinct `ps -eww -o args=` line, appended to SEEN as it first appears; stops when SEEN
# + ".stop" exists, writing the number of samples to SEEN + ".count".
SAMPLER_CODE = f"""
import os, subprocess
seen, n = set(), 0
with open({SEEN!r}, "a") as out:
    while not os.path.exists({SEEN!r} + ".stop"):
        lines = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True).stdout.splitlines()
        n += 1
        new = [ln for ln in lines if ln not in seen]
        seen.update(new)
        out.write("".join(ln + "\\n" for ln in new))
        out.flush()
open({SEEN!r} + ".count", "w").write(str(n))
"""


@dataclass
class Evidence:
    """What one run left, by source; `where` names each leak found."""

    sources: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def leaks(self) -> list[str]:
        return [f"{what} ({value}) appears in {source}: {_context(text, value)}"
                for source, text in self.sources.items() for what, value in CANARIES.items() if value in text]


def _context(text: str, value: str) -> str:
    i = text.index(value)
    return repr(text[max(0, i - 160):i + len(value) + 40])


def _ssh(cluster: ScratchCluster, command: str, stdin: str = "", timeout: float = 300) -> str:
    proc = subprocess.run(["ssh", "-F", str(cluster.state_dir / "ssh_config"), "node1", command], input=stdin,
                          capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
    assert proc.returncode == 0, f"node1: {command!r} failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stdout


def _model_path(cluster: ScratchCluster) -> str:
    doc = yaml.safe_load((cluster.inventory / "group_vars" / "all" / "cluster.yml").read_text())
    return str(doc["pdfleet_cluster"]["model"]["path"])


def _get(url: str, key: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


class LocalSampler:
    """`ps -eww -o args=` on the control machine, sampled in a thread until stopped (distinct lines kept)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True, check=False).stdout
            self.seen.update(out.splitlines())
            self.samples += 1

    def __enter__(self) -> LocalSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture(scope="module")
def hub(converged: ScratchCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """The test hub on the scratch cluster's bridge address, serving the model's repository to the canary token."""
    sim = yaml.safe_load((converged.inventory / "group_vars" / "all" / "sim.yml").read_text())["pdfleet_sim"]
    root = tmp_path_factory.mktemp("hubrepo")
    _repo_files(root)
    with serve(HubRepo(root, REPO_ID, HF_CANARY), address=sim["gateway"]) as server:
        yield server


def exercise(cluster: ScratchCluster, hub: HubServer, tmp: Path) -> Evidence:
    """Turn both secrets on, run site.yml at -vvv while sampling `ps`, and collect every source."""
    ev = Evidence()
    model_path = _model_path(cluster)
    _ssh(cluster, f"rm -rf {model_path}")  # the stand-in goes: the hub download must run
    cluster.set_model("router", api_key=True)
    cluster.set_model("model", source="hub", allow_branch_revision=True)  # the test hub serves its branch main
    extra = tmp / "secrets.json"  # -e @file: the values never reach a command line on the control machine
    extra.touch(mode=0o600)
    extra.write_text(json.dumps({"model_hf_token": HF_CANARY, "model_hub_endpoint": hub.url, "model_hub_poll_s": 1,
                                   "pdfleet_units_secrets": {"PDFLEET_ROUTER_API_KEY": KEY_CANARY}}))
    _ssh(cluster, f"rm -f {SEEN} {SEEN}.stop {SEEN}.count && cat > {SAMPLER}", stdin=SAMPLER_CODE)
    _ssh(cluster, f"nohup python3 {SAMPLER} >/dev/null 2>&1 </dev/null &")
    wait_for("the ps sampler on node1 to start",
             lambda: _ssh(cluster, f"test -s {SEEN} && echo yes || true").strip(), 60)

    hold = hub.hold(BIG, after=MIB)
    download_seen: list[str] = []

    finished = threading.Event()  # the playbook ended: a download that never reached the hub will not now

    def watch_download() -> None:
        """While the hub holds the weight file, wait until the host's sampler saw `hf download` running."""
        while not hold.arrived.wait(2):
            if finished.is_set():
                return
        try:
            download_seen.append(wait_for(
                "hf download in node1's ps samples",
                lambda: [ln for ln in _ssh(cluster, f"cat {SEEN}").splitlines() if " download " + REPO_ID in ln],
                60)[0])
        finally:
            hold.release.set()

    watcher = threading.Thread(target=watch_download)
    watcher.start()
    started = time.monotonic()
    try:
        with LocalSampler() as local:
            proc = cluster.playbook(SITE, "-vvv", "-e", f"@{extra}", check=False)
    finally:
        finished.set()
        hold.release.set()
        watcher.join()
        _ssh(cluster, f"touch {SEEN}.stop")
        extra.unlink()
    samples = int(wait_for("the ps sampler on node1 to stop",
                           lambda: _ssh(cluster, f"cat {SEEN}.count 2>/dev/null || true").strip(), 60))
    ev.sources["ansible-playbook -vvv output"] = proc.stdout + proc.stderr
    if proc.returncode != 0:
        ev.problems.append(f"site.yml with router.api_key and the hub source failed (rc {proc.returncode}):\n"
                           f"{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")
    print(f"site.yml (hub, api_key, -vvv): {time.monotonic() - started:.0f} s; ps samples: node1 {samples}, "
          f"control machine {local.samples}")

    # ps: on the host for the whole run, and on the control machine
    host_ps = _ssh(cluster, f"cat {SEEN}")
    ev.sources["`ps -eww -o args` on node1 during the run"] = host_ps
    ev.sources["`ps -eww -o args` on the control machine during the run"] = "\n".join(sorted(local.seen))
    if not download_seen:
        ev.problems.append("node1's ps samples never showed `hf download` while the hub held a file: the download "
                           "task was not reached or not sampled")
    # the gateway as ps shows it: smg sets its process title (smg::router), sglang-router 0.3.2 runs as its module
    if not any(t in host_ps for t in ("smg::router", "smg.launch_router", "sglang_router", "sglang::router")):
        ev.problems.append("node1's ps samples never showed the router")
    if not any("pdfleet.verify" in ln for ln in local.seen):
        ev.problems.append("the control machine's ps samples never showed the verification (pdfleet.verify)")

    # files on the host: the key only in secrets.env (0600 root:root), the token nowhere
    where: dict[str, list[str]] = {}
    for what, value in CANARIES.items():  # one grep per value (binary files too: Prometheus' data)
        for path in _ssh(cluster, "grep -rlF -D skip -f - " + " ".join(HOST_DIRS) + " --exclude-dir=journal "
                         "2>/dev/null; true", stdin=value + "\n", timeout=600).split():
            if path != SEEN:  # the ps samples themselves (checked above as ps)
                where.setdefault(path, []).append(what)
    stray = {p: w for p, w in where.items() if p != SECRETS_ENV or w != ["the router API key"]}
    if stray:
        ev.problems.append(f"files on node1 holding a secret outside {SECRETS_ENV}: {stray}")
    if where.get(SECRETS_ENV) != ["the router API key"]:
        ev.problems.append(f"{SECRETS_ENV} on node1 does not hold the router API key (found: {where})")
    mode = _ssh(cluster, f"stat -c '%a %U %G' {SECRETS_ENV}").strip()
    if mode != "600 root root":
        ev.problems.append(f"{SECRETS_ENV} on node1 is '{mode}' (mode owner group), wants '600 root root'")
    units = _ssh(cluster, "cat /etc/systemd/system/pdfleet-*.service; systemctl show 'pdfleet-*' --all")
    ev.sources["the pdfleet units on node1 (files and systemctl show)"] = units
    for token in ("${PDFLEET_ROUTER_API_KEY}", "$PDFLEET_ROUTER_API_KEY"):
        if token in units:  # systemd expands it into argv: `ps` shows the value
            ev.problems.append(f"a pdfleet unit on node1 puts {token} on a command line (systemd expands it into argv)")

    # the whole journal, every field
    journal = _ssh(cluster, "journalctl --no-pager -o verbose", timeout=600)
    ev.sources["node1's journal (journalctl -o verbose)"] = journal
    if "Invoked with" not in journal and "ansible-" not in journal:
        ev.problems.append("node1's journal holds no Ansible module runs: it was not the run's journal")

    # the reports the verification play wrote (report and journal dumps)
    reports = {p: p.read_text(errors="replace") for p in cluster.reports_dir.rglob("*") if p.is_file()}
    for p, text in reports.items():
        ev.sources[f"report file {p}"] = text
    if not any(p.name.startswith("verify-") and p.suffix == ".json" for p in reports):
        ev.problems.append(f"no verification report under {cluster.reports_dir}")
    elif proc.returncode == 0 and not cluster.latest_report()["ok"]:
        ev.problems.append("the verification report of the run did not pass")

    # Prometheus: every series' labels, and the text of every target it scrapes
    prom = f"http://{cluster.address}:9090"
    status, targets = _get(prom + "/api/v1/targets")
    active = json.loads(targets)["data"]["activeTargets"] if status == 200 else []
    if not any(t["health"] == "up" for t in active):
        ev.problems.append(f"Prometheus on node1 scrapes no healthy target ({status}: {targets[:300]})")
    ev.sources["Prometheus /api/v1/targets"] = targets
    status, series = _get(prom + "/api/v1/series?" + urllib.parse.urlencode({"match[]": '{__name__=~".+"}'}))
    ev.sources["Prometheus series labels (/api/v1/series)"] = series
    if status != 200 or len(json.loads(series)["data"]) == 0:
        ev.problems.append(f"Prometheus on node1 returned no series ({status})")
    for t in active:
        ev.sources[f"scraped text of {t['scrapeUrl']}"] = _get(t["scrapeUrl"])[1]

    # the workers' environment: no key (each unit reads only its own secrets file)
    for unit in ("pdfleet-prefill0", "pdfleet-decode0"):
        env = _ssh(cluster, f"tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value {unit})/environ")
        ev.sources[f"the environment of {unit}'s process"] = env
        if "PYTHONUNBUFFERED=1" not in env:
            ev.problems.append(f"could not read the environment of {unit}'s process: {env[:300]}")

    # the key reached the router and is enforced there: nobody without it lists, adds or removes workers
    listing = [_get(cluster.router_url + "/workers")[0], _get(cluster.router_url + "/workers", KEY_CANARY)[0]]
    if listing != [401, 200]:
        ev.problems.append(f"GET /workers without/with the key answered {listing}, wants [401, 200]")
    stranger = urllib.request.Request(cluster.router_url + "/workers", method="POST",
                                      data=json.dumps({"url": "http://10.77.0.99:30000"}).encode(),
                                      headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(stranger, timeout=10) as resp:
            added = resp.status
    except urllib.error.HTTPError as e:
        added = e.code
    if added != 401:
        ev.problems.append(f"POST /workers without the key answered {added}, wants 401")
    return ev


def restore(cluster: ScratchCluster, model_file: bytes) -> None:
    """Back to the converged state: the scratch inventory's cluster.yml byte for byte (the inventory's own key, the
    stand-in model), no sampler files."""
    (cluster.inventory / "group_vars" / "all" / "cluster.yml").write_bytes(model_file)
    model_path = _model_path(cluster)
    _ssh(cluster, f"touch {SEEN}.stop; rm -rf {model_path} {SECRETS_ENV} {SAMPLER} {SEEN} {SEEN}.stop {SEEN}.count")
    cluster.playbook()
    cluster.wait_ready()


def test_secrets_stay_out_of_output_logs_reports_metrics_and_ps(converged: ScratchCluster, hub: HubServer,
                                                               tmp_path: Path) -> None:
    model_file = (converged.inventory / "group_vars" / "all" / "cluster.yml").read_bytes()
    try:
        ev = exercise(converged, hub, tmp_path)
    finally:
        restore(converged, model_file)
    failures = ev.problems + ev.leaks()
    assert not failures, f"{len(failures)} problem(s):\n" + "\n".join(f"- {f}" for f in failures)
