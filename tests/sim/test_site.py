"""site.yml on the shared converged one-host sim (tests/conftest.py): it serves through the real router, a second
run changes nothing (the suite's one idempotence test) and check mode shows no change (its one check-mode test),
each stage runs alone with its tag (the verify stage running its protocol), and the roles put back or refuse a
hand edit. Tests marked ``mutates`` run last and put back what they change."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from htmlreport.browser import load as load_page
from pdfleet.patch import manifest as patches
from pdfleet.paths import REPO_ROOT
from pdfleet.versions import PINS, ROUTER_RELEASES, router_module
from simcluster import SITE, ScratchCluster, recap, wait_for

pytestmark = [pytest.mark.sim, pytest.mark.slow]


@contextmanager
def _converge_again_if_it_fails(cluster: ScratchCluster) -> Iterator[None]:
    """For a test whose own converge puts back what it changed: if a step fails before that, converge anyway (the
    shared sim must be left converged: tests/conftest.py), then let the failure through."""
    try:
        yield
    except BaseException:
        cluster.playbook(SITE, "--skip-tags", "verify", check=False)
        raise


def test_completion_through_the_router(converged: ScratchCluster) -> None:
    out = converged.chat("In one sentence, what is PCIe?")
    assert out["id"].startswith("chatcmpl-")
    assert out["model"] == converged.model
    assert out["usage"]["completion_tokens"] > 0
    assert out["choices"][0]["message"]["content"]


def test_second_run_changes_nothing(converged: ScratchCluster) -> None:
    """site.yml again, verification included: nothing changes on the host nor on the control machine."""
    proc = converged.playbook()
    for host in ("node1", "localhost"):
        assert recap(proc.stdout, host)["changed"] == 0, proc.stdout[-4000:]


def test_the_first_converge_starts_each_unit_once(converged: ScratchCluster) -> None:
    """On a new host the units start once: the restart handler (notified by the install of SGLang, the unit files
    and their environment) leaves alone the units the run itself started from stopped."""
    out = converged.first_converge_stdout
    assert "PLAY RECAP" in out, "the shared sim's fixture did not keep its first converge's output"
    units = ["pdfleet-prefill0", "pdfleet-decode0", "pdfleet-router"]  # the one-host sim's plan
    started = _changed_items(out, "TASK [pdfleet.cluster.pdfleet_units : Enable and start the units]")
    restarted = _changed_items(out, "RUNNING HANDLER [pdfleet.cluster.pdfleet_units : Restart pdfleet units]")
    assert sorted(started) == sorted(units), out[-4000:]
    assert restarted == [], f"the first converge restarted {restarted} right after starting them"


def _changed_items(stdout: str, task: str) -> list[str]:
    """The loop items (labels) a task reported "changed" for on node1, from the default callback's text."""
    out, inside = [], False
    for line in stdout.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            inside = line.startswith(task)
        elif inside and line.startswith("changed: [node1] => (item="):
            out.append(line.split("(item=", 1)[1].rsplit(")", 1)[0])
    return out


def test_check_mode_on_a_converged_cluster(converged: ScratchCluster) -> None:
    proc = converged.playbook(SITE, "--check", "--diff")
    assert recap(proc.stdout, "node1")["changed"] == 0, proc.stdout[-4000:]


@pytest.mark.parametrize("tag", ["preflight", "provision", "deploy", "watchdog"])
def test_each_stage_runs_alone_with_its_tag(converged: ScratchCluster, tag: str) -> None:
    """`--tags <stage>` runs that stage (and the plan it reads) without the others: the plays whose tasks are not
    selected still check their roles' arguments (Ansible tags those checks always), and must not need what an
    unselected play would have made (the wheel). Check mode: nothing changes. The verify stage is the next test:
    in check mode its protocol is skipped, so it runs for real there."""
    proc = converged.playbook(SITE, "--tags", tag, "--check")
    assert recap(proc.stdout, "node1")["changed"] == 0, proc.stdout[-4000:]
    assert recap(proc.stdout, "node1")["failed"] == 0, proc.stdout[-4000:]


PROTOCOL_TASK = "TASK [Run config gate, deep liveness, abort cascades, recovery and benchmark (logs come next)]"


def test_the_verify_stage_runs_its_protocol_alone(converged: ScratchCluster) -> None:
    """`--tags verify` (not in check mode) runs the verification protocol on the converged cluster and nothing of
    the converge: a new report whose cascade killed sessions and whose checks passed, and no change.
    Its HTML page lies beside the JSON, its path in the stage's output, and a headless browser builds it with
    the figures of this run (tests/htmlreport/browser.py; issue 28 item 4).
    That the same stage fails on a wedged cluster is shown in tests/sim/test_wedge.py."""
    before = set(converged.reports_dir.glob("verify-*.json"))
    proc = converged.playbook(SITE, "--tags", "verify")  # raises unless the verification passed
    assert recap(proc.stdout, "node1")["changed"] == 0, proc.stdout[-4000:]
    assert PROTOCOL_TASK in proc.stdout, proc.stdout[-4000:]
    new = set(converged.reports_dir.glob("verify-*.json")) - before
    assert len(new) == 1, f"the verify stage wrote {len(new)} reports: {sorted(p.name for p in new)}"
    path = new.pop()
    report = json.loads(path.read_text())
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert report["verdict"] == "pass" and report["ok"] is True, report.get("failures")
    protocol = ("config", "liveness", "cascade", "recovery", "logs")
    assert {name: statuses.get(name) for name in protocol} == dict.fromkeys(protocol, "pass"), statuses
    cascade = next(c for c in report["checks"] if c["name"] == "cascade")
    assert cascade["measured"]["killed"] > 0, cascade
    # the page of this run, as a browser builds it
    page = path.with_suffix(".html")
    assert page.is_file(), f"no page beside {path}"
    assert f"page: {page}" in proc.stdout, proc.stdout[-4000:]
    dom = load_page(page)
    assert dom.verdict == "VERDICT: PASS exit 0", dom.verdict
    assert dom.figures == ["protocol", "cascade", "latency"] and "script" not in dom.tags, dom.figures
    drawn = {s["data-check"]: s["data-status"] for s in dom.shapes if "data-check" in s}
    assert drawn == statuses, (drawn, statuses)
    cycles = [str(c["cycle"]) for c in cascade["detail"]["cycles"]]
    assert [s["data-cycle"] for s in dom.shapes if "data-cycle" in s] == cycles
    killed = [s for s in dom.shapes if s.get("data-phase", "").startswith("killed")]
    assert killed, "the cascade's killed sessions are not drawn"
    bench = next((c for c in report["checks"] if c["name"] == "bench"), None)
    if bench is not None and (bench.get("detail") or {}).get("latency_samples", {}).get("ttft_ms"):
        assert any("data-bin" in s for s in dom.shapes), "the benchmark's latencies are not drawn"


def test_units_run_as_the_unprivileged_user(converged: ScratchCluster) -> None:
    for unit in ("pdfleet-prefill0", "pdfleet-decode0", "pdfleet-router"):
        props = converged.ssh(f"systemctl show -p MainPID,NoNewPrivileges,ProtectSystem {unit}").stdout
        assert "NoNewPrivileges=yes" in props and "ProtectSystem=strict" in props, props
        pid = props.split("MainPID=")[1].split()[0]
        assert converged.ssh(f"ps -o user= -p {pid}").stdout.strip() == "pdfleet", unit


def test_record_matches_the_patched_file(converged: ScratchCluster) -> None:
    record = json.loads(converged.ssh("cat /opt/pdfleet/venv/pdfleet-record.json").stdout)
    found = converged.ssh(f"sha256sum {record['file']}").stdout.split()[0]
    assert record["patched"] is True and record["patch_id"] == "nixl-abort-v2"
    assert found == record["sha256"]


@pytest.mark.mutates
def test_drift_fails_and_leaves_the_file_untouched(converged: ScratchCluster) -> None:
    record = json.loads(converged.ssh("cat /opt/pdfleet/venv/pdfleet-record.json").stdout)
    conn = record["file"]
    assert converged.ssh(f"echo '# hand edit' >> {conn}").returncode == 0
    before = converged.ssh(f"sha256sum {conn}").stdout.split()[0]
    try:
        proc = converged.playbook(check=False)
        assert proc.returncode != 0
        assert f"node1: {conn} has sha256 {before}" in proc.stdout
        assert "nothing was changed" in proc.stdout
        assert converged.ssh(f"sha256sum {conn}").stdout.split()[0] == before
    finally:
        converged.ssh(f"sed -i '$ d' {conn}")  # undo the hand edit: the file is patched again
    assert converged.ssh(f"sha256sum {conn}").stdout.split()[0] == record["sha256"]


SUPERSEDED = REPO_ROOT / "tests" / "sglang" / "superseded"


@pytest.mark.mutates
def test_an_earlier_pdfleet_patch_is_replaced_by_the_current_one(converged: ScratchCluster) -> None:
    """A host converged by an earlier pdfleet carries an earlier patch of the same version: the next converge puts
    the wheel's own conn.py back and patches it (it is no hand edit, so it is not refused)."""
    record = json.loads(converged.ssh("cat /opt/pdfleet/venv/pdfleet-record.json").stdout)
    conn, manifest = record["file"], patches.load_manifest(record["version"])
    old_id, old_sha = next(iter(manifest.superseded.items()))
    swap = (f"cat > /root/current.patch <<'EOF'\n{manifest.patch_path.read_text()}EOF\n"
            f"cat > /root/old.patch <<'EOF'\n{(SUPERSEDED / record['version'] / f'{old_id}.patch').read_text()}EOF\n"
            f"patch -R -s {conn} /root/current.patch && patch -s {conn} /root/old.patch")
    with _converge_again_if_it_fails(converged):
        assert converged.ssh(swap).returncode == 0
        assert converged.ssh(f"sha256sum {conn}").stdout.split()[0] == old_sha
        proc = converged.playbook(SITE, "--skip-tags", "verify", check=False)
        assert proc.returncode == 0, proc.stdout[-4000:]
        changed = [line.split("[", 1)[1].split("]", 1)[0] for line in _changed_tasks(proc.stdout)]
        assert ("pdfleet.cluster.sglang : Put back the wheel's conn.py over an earlier pdfleet patch of this version"
                in changed), changed
        assert "pdfleet.cluster.sglang : Apply the patch to the pristine conn.py" in changed, changed
        assert converged.ssh(f"sha256sum {conn}").stdout.split()[0] == manifest.patched_sha256
        after = json.loads(converged.ssh("cat /opt/pdfleet/venv/pdfleet-record.json").stdout)
        assert after["patch_id"] == manifest.patch_id and after["sha256"] == manifest.patched_sha256


WATCHDOG_WHEEL_FILE = "/opt/pdfleet-watchdog/venv/lib/python3*/site-packages/pdfleet/watchdog/__init__.py"
APPENDED = ["/etc/systemd/system/pdfleet-watchdog.service", "/etc/prometheus/pdfleet-alerts.yml",
            "/srv/models/DeepSeek-V4-Flash/README.md", WATCHDOG_WHEEL_FILE]
CHMODDED = "/etc/pdfleet-watchdog/plan.json"
GATEWAY_DISTS = "/opt/pdfleet/gateway/lib/python3*/site-packages/*.dist-info"
# What an operator's hand does on the host; the next converge must put each one back. The last floats a dependency
# of the gateway off its hash lock (files/gateway/smg-1.13.0.lock has setproctitle 1.3.8).
DRIFT = [f"echo '# hand edit' >> {p}" for p in APPENDED] + [
    f"chmod 0644 {CHMODDED}", "/opt/pdfleet/gateway/bin/pip install -q --no-deps setproctitle==1.3.7"]


def _fingerprint(cluster: ScratchCluster) -> str:
    paths = " ".join([*APPENDED, CHMODDED])
    return cluster.ssh(f"stat -c '%n %a %U %G' {paths} && sha256sum {paths} && ls -d {GATEWAY_DISTS} && "
                       "systemctl is-active prometheus").stdout


@pytest.mark.mutates
def test_drift_is_noticed_by_the_one_look_and_put_back(converged: ScratchCluster) -> None:
    """The roles decide "already so" from one look per role: a hand edit of a file, its mode, the installed wheel
    or a stopped service must still be seen and put back by the next converge (and only then is it a no-op)."""
    before = _fingerprint(converged)
    assert "active" in before.splitlines()[-1], before
    with _converge_again_if_it_fails(converged):
        for command in DRIFT:
            assert converged.ssh(command).returncode == 0, command
        assert converged.ssh("systemctl stop prometheus").returncode == 0
        assert _fingerprint(converged) != before
        proc = converged.playbook(SITE, "--skip-tags", "verify")
        changed = [line.split("[", 1)[1].split("]", 1)[0] for line in _changed_tasks(proc.stdout)]
        for task in ("pdfleet.cluster.pdfleet_watchdog : Write the unit",
                     "pdfleet.cluster.pdfleet_watchdog : Write the plan document the watchdog watches",
                     "pdfleet.cluster.pdfleet_watchdog : Install the pdfleet wheel without dependencies",
                     "pdfleet.cluster.pdfleet_monitoring : Install the pdfleet alert rules (checked by promtool"
                     " first)",
                     "pdfleet.cluster.pdfleet_monitoring : Enable and start Prometheus",
                     "pdfleet.cluster.model : Write the simulation stand-in (a tokenizer, no weights)",
                     "pdfleet.cluster.sglang : Install the router from its hash lock"):
            assert task in changed, f"{task!r} did not run; changed: {changed}"
        wait_for("prometheus and the watchdog active again",
                 lambda: converged.ssh("systemctl is-active prometheus pdfleet-watchdog").stdout.split()
                 == ["active", "active"], 60)
        assert _fingerprint(converged) == before
        assert recap(converged.playbook(SITE, "--skip-tags", "verify").stdout, "node1")["changed"] == 0


def _changed_tasks(stdout: str) -> list[str]:
    """The TASK lines whose result on node1 was "changed" (the default callback's text)."""
    out, task = [], ""
    for line in stdout.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task = line
        elif line.startswith("changed: [node1]") and task:
            out.append(task)
    return out


def test_the_watchdog_runs_from_the_wheel_and_watches_the_pair(converged: ScratchCluster) -> None:
    """site.yml's watchdog play: the service stays up (it imports pdfleet from the installed wheel, constants.yml
    included), writes its state, and its canary through the pair says OK."""
    assert converged.ssh("systemctl is-active pdfleet-watchdog").stdout.strip() == "active"
    marker = converged.ssh("cat /opt/pdfleet-watchdog/venv/pdfleet-wheel.sha256").stdout.strip()
    assert len(marker) == 64, marker
    assert converged.ssh("test -e /opt/pdfleet-watchdog/lib").returncode != 0  # the old package tree is gone
    deadline = time.monotonic() + 180
    doc: dict = {}
    while time.monotonic() < deadline:
        proc = converged.ssh("pdfleet-watchdog status --json", timeout=60)
        if proc.returncode in (0, 1) and proc.stdout.strip():
            doc = json.loads(proc.stdout)
            if doc.get("pairs", {}).get("node1", {}).get("state") == "OK":
                break
        time.sleep(5)
    assert doc.get("pairs", {}).get("node1", {}).get("state") == "OK", doc
    restarts = converged.ssh("systemctl show -p NRestarts --value pdfleet-watchdog").stdout.strip()
    assert restarts == "0", f"pdfleet-watchdog restarted {restarts} times"
    # the Python its restart remediation starts the gate's private router with has the gateway (the router's own
    # venv since the gateway left the service venv: a watchdog pointed at the service venv could not gate a pair)
    argv = converged.ssh("systemctl show -p ExecStart --value pdfleet-watchdog").stdout.split()
    python = argv[argv.index("--router-python") + 1]
    module = router_module(PINS["sglang_router_package"])
    look = f"import importlib.util, sys; sys.exit(importlib.util.find_spec('{module}') is None)"
    found = converged.ssh(f'runuser -u pdfleet-watchdog -- {python} -c "{look}"')
    assert found.returncode == 0, f"{python} on node1 cannot import {module}: {found.stdout}{found.stderr}"


def _main_pids(cluster: ScratchCluster, units: tuple[str, ...]) -> dict[str, str]:
    out = cluster.ssh(" && ".join(f"systemctl show -p MainPID --value {u}" for u in units)).stdout.split()
    return dict(zip(units, out, strict=True))


@pytest.mark.mutates
def test_a_restart_owed_by_an_interrupted_run_is_made_by_the_next(converged: ScratchCluster) -> None:
    """A run stopped after it changed what the workers run (here the patch record) but before its restart handler
    leaves them on the old code; the next converge sees each unit that started before its files or code last
    changed and restarts that one only (the router runs none of that code), then is a no-op again."""
    units = ("pdfleet-prefill0", "pdfleet-decode0", "pdfleet-router")
    before = _main_pids(converged, units)
    # What the interrupted run left: the record rewritten after the workers started (same content, newer).
    with _converge_again_if_it_fails(converged):
        assert converged.ssh("sleep 3 && touch -m /opt/pdfleet/venv/pdfleet-record.json").returncode == 0
        proc = converged.playbook(SITE, "--skip-tags", "verify")
        assert proc.returncode == 0, proc.stdout[-4000:]
        restarted = [t for t in _changed_tasks(proc.stdout) if "Restart the units started before" in t]
        assert restarted, proc.stdout[-4000:]
        wait_for("the workers active again",
                 lambda: converged.ssh(f"systemctl is-active {' '.join(units)}").stdout.split() == ["active"] * 3, 60)
        after = _main_pids(converged, units)
        assert after["pdfleet-prefill0"] != before["pdfleet-prefill0"]
        assert after["pdfleet-decode0"] != before["pdfleet-decode0"]
        assert after["pdfleet-router"] == before["pdfleet-router"]
        assert recap(converged.playbook(SITE, "--skip-tags", "verify").stdout, "node1")["changed"] == 0


def _router_exec(cluster: ScratchCluster) -> str:
    return cluster.ssh("systemctl show -p ExecStart --value pdfleet-router").stdout


def _dists(cluster: ScratchCluster, venv: str) -> set[str]:
    code = "import importlib.metadata as m; print(' '.join(sorted(d.name for d in m.distributions())))"
    return set(cluster.ssh(f"{venv}/bin/python -c {json.dumps(code)}").stdout.split())


@pytest.mark.mutates
def test_a_cluster_moves_between_routers_by_a_converge(converged: ScratchCluster) -> None:
    """The migration, no hand steps: a host laid out as before the gateway had a venv of its own (sglang-router in
    the service venv) converges to sglang-router 0.3.2 in the gateway venv (the service venv's copy removed), then
    to the pinned smg there; each time the router unit runs the package the plan names, from that venv only, and
    serves."""
    service, gateway = "/opt/pdfleet/venv", "/opt/pdfleet/gateway"
    with _converge_again_if_it_fails(converged):
        old = ROUTER_RELEASES["sglang-router"]
        proc = converged.ssh(f"{service}/bin/pip install -q sglang-router=={old}", timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        with converged.model_changed("sglang", router_package="sglang-router", router_version=old):
            converged.playbook(SITE, "--skip-tags", "verify")
            assert "sglang_router.launch_router" in _router_exec(converged)
            assert f"{gateway}/bin/python" in _router_exec(converged)
            assert "sglang-router" in _dists(converged, gateway) and "smg" not in _dists(converged, gateway)
            assert not {"sglang-router", "smg"} & _dists(converged, service)
            converged.wait_ready()
            assert converged.chat("hi")["usage"]["completion_tokens"] > 0
        converged.playbook(SITE, "--skip-tags", "verify")
        assert "smg.launch_router" in _router_exec(converged)
        assert "smg" in _dists(converged, gateway) and "sglang-router" not in _dists(converged, gateway)
        converged.wait_ready()
        assert converged.chat("hi")["usage"]["completion_tokens"] > 0
        assert recap(converged.playbook(SITE, "--skip-tags", "verify").stdout, "node1")["changed"] == 0


def _labels(cluster: ScratchCluster) -> dict[str, str]:
    """Each listed worker's pairing protocol, as the gateway reports it."""
    from pdfleet import fleet

    client = fleet.RouterClient(cluster.router_url, api_key=cluster.router_key)
    return {w.spec.url: w.spec.pairing for w in client.workers()}


@pytest.mark.mutates
def test_a_gateway_that_restarts_registers_each_worker_under_its_version(converged: ScratchCluster) -> None:
    """smg's unit lists no worker; its registrar (ExecStartPost, detached in the unit) registers each planned worker
    under the protocol of the version the worker reports, with the gateway's key from the unit's secrets file. A
    `kill -9` of the gateway: systemd starts it again, the registrar runs again, the same labels come back and it
    serves (a gateway that restarts mid-swap never pairs two versions: tests/simworker/test_gateway_members.py)."""
    argv = _router_exec(converged).split()  # (--prefill-policy and --decode-policy are there: whole words only)
    assert "--prefill" not in argv and "--decode" not in argv, argv
    post = converged.ssh("systemctl show -p ExecStartPost --value pdfleet-router").stdout
    assert "pdfleet.fleet.members" in post and "--detach" in post, post
    version = str(json.loads(converged.ssh("cat /opt/pdfleet/venv/pdfleet-record.json").stdout)["version"])
    planned = {f"http://{converged.address}:30000", f"http://{converged.address}:30001"}
    assert _labels(converged) == dict.fromkeys(planned, f"sglang-{version}")
    pid = _main_pids(converged, ("pdfleet-router",))["pdfleet-router"]
    assert converged.ssh("systemctl kill -s KILL pdfleet-router").returncode == 0
    wait_for("the gateway started again", lambda: _main_pids(converged, ("pdfleet-router",))["pdfleet-router"]
             not in (pid, "0"), 60)
    wait_for("both workers registered again", lambda: _safe_labels(converged) == dict.fromkeys(
        planned, f"sglang-{version}"), 90)
    converged.wait_ready()
    assert converged.chat("hi after the gateway's restart")["usage"]["completion_tokens"] > 0
    journal = converged.ssh("journalctl -u pdfleet-router -o cat --no-pager -n 200").stdout
    assert journal.count("pdfleet-members: every planned worker is registered") >= 1, journal[-3000:]
    # the registrar of the killed gateway went with it: one process per start, none left over
    assert converged.ssh("pgrep -f '[p]dfleet[.]fleet[.]members'").stdout.split() == [], "a registrar is still running"


def _safe_labels(cluster: ScratchCluster) -> dict[str, str] | None:
    try:
        return _labels(cluster)
    except Exception:  # the gateway is starting
        return None
