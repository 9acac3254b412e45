"""The fleet operations on mono-tp8 (issue 14: a mono instance is a pair of one), on one scratch copy of
inventory/sim-mono staged pristine (apply_patch: false) with `site.yml --skip-tags verify`, in this order:

1. rollout.yml to the patched stack under steady client load: with min_pairs=1 asked for it is refused before
   anything changes (one instance cannot keep a pair serving); unset, the plan names the one-pair cluster, check
   mode touches nothing, the mono worker leaves the router (its listing empties), is drained, patched, gated alone
   through a private router (`--worker-urls`, the verification protocol's mono checks) and re-added with
   routing confirmed; in-flight requests finish, new ones in the window get a fast 503, never a hang;
2. the watchdog watches the mono instance as a pair of one: OK on the patched stack; the stand-in has no KV
   path to wedge, so its worker is frozen (SIGSTOP): the pair goes DEAD within the canary deadline plus an
   interval and back to OK after SIGCONT; its `restart` remediation (the rollout's steps) heals the pair of one
   unattended, the one-pair exception letting it act with no other pair serving;
3. `pdfleet ops` status/logs/canary against the scratch inventory plus a host at an unused address of the
   scratch bridge: exit 2, that host named in one line, node1 still reported; drain/undrain move the mono
   worker out of the router and back.

All `long` (the staging converge alone takes ~5 min here). Shares the rollout tests' fixture helpers."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet.loadgen import Load
from pdfleet import fleet
from pdfleet.inventory import load_inventory
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet.remote import connection_for
from pdfleet.remote import run as remote_run
from pdfleet.watchdog.actions import FleetActions, privileged_ssh
from pdfleet.watchdog.remediate import Remediator
from pdfleet.watchdog.state import PairTracker, State
from simcluster import BIN, ScratchCluster, wait_for

from .conftest import _staged
from .helpers import ListingWatch, get_json, rollout

pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.long]

MONO_INVENTORY = REPO_ROOT / "inventory" / "sim-mono"
UNIT = "pdfleet-mono0"


@pytest.fixture(scope="module")
def mono(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    yield from _staged(tmp_path_factory.mktemp("rolloutmono"), MONO_INVENTORY)


def _pdfleet(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "pdfleet"), *args], capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=REPO_ROOT)


def _listed(c: ScratchCluster) -> list[dict[str, Any]]:
    return list(get_json(c.router_url + "/workers")["workers"])


def _mono_url(c: ScratchCluster) -> str:
    (pair,) = fleet.pairs_from_plan(plan_inventory(c.inventory)).values()
    assert [m.role for m in pair.members] == ["mono"]
    return pair.members[0].url


def test_rollout_drains_gates_and_readds_the_mono_instance(mono: ScratchCluster) -> None:
    c = mono
    url = _mono_url(c)
    assert [w["url"] for w in _listed(c)] == [url]
    c.set_model("sglang", apply_patch=True)
    plan = _pdfleet("rollout", "plan", "-i", str(c.inventory), "--json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    doc = json.loads(plan.stdout)
    doc = doc.get("rollout", doc)
    # a pair of one: host by host, the one-pair exception (nothing else can serve), a window without service
    assert doc["strategy"] == "host-by-host" and doc["order"] == ["node1"] and doc["total_pairs"] == 1, doc
    assert doc["effective_min_pairs"] == 0 and not doc["refusal"] and doc["steps"][0]["serving_pairs_while_out"] == 0
    assert doc["actions"]["node1"]["pair"]["members"][0]["role"] == "mono"

    ids = sorted(w["id"] for w in _listed(c))
    # min_pairs=1 asked for: one mono instance cannot keep a pair serving while it rolls: refused, nothing changed
    strict = _pdfleet("rollout", "plan", "-i", str(c.inventory), "--min-pairs", "1")
    assert strict.returncode == 1 and "REFUSED: batch 1 (node1) would leave 0 serving pair(s)" in strict.stdout, \
        strict.stdout + strict.stderr
    refused = rollout(c, "-e", "pdfleet_rollout_min_pairs=1")
    flat = " ".join(refused.stdout.split())  # the callback wraps long messages
    said = flat[flat.find("rollout refused"):][:400]
    print(f"\n[mono rollout, min_pairs=1] rc {refused.rc} in {refused.seconds:.0f} s: {said}")
    assert refused.rc != 0 and refused.report is None, refused.stdout[-4000:]
    assert said.startswith("rollout refused, nothing changed: batch 1 (node1) would leave 0 serving pair(s), fewer "
                           "than min_pairs=1") and "pdfleet_rollout_min_pairs lower" in said, refused.stdout[-4000:]
    assert refused.recap()["node1"]["changed"] == 0, refused.recap()
    assert sorted(w["id"] for w in _listed(c)) == ids  # the mono worker never left the router
    assert "pristine" in _pdfleet("rollout", "status", "-i", str(c.inventory)).stdout

    check = rollout(c, "--check", "--diff")
    assert check.rc == 0, check.stdout[-4000:]
    assert sorted(w["id"] for w in _listed(c)) == ids  # check mode left the router alone

    with ListingWatch(c.router_url) as watch, Load(c.router_url, c.model) as load:
        run = rollout(c)
    s = load.summary()
    assert run.report is not None, run.stdout[-6000:]
    print(f"\n[mono rollout] {run.seconds:.0f} s, load {s}, listing snapshots "
          f"{[(round(x['t'] - watch.snapshots[0]['t'], 1), x['urls']) for x in watch.snapshots]}\n"
          + "\n".join(run.report["table"]))
    assert run.rc == 0, run.stdout[-6000:]
    host = run.report["hosts"]["node1"]
    tl = host["timeline"]
    for step in ("removed", "idle", "stopped", "applied", "started", "gated", "readded"):
        assert tl.get(step), (step, tl)
    # drained: the mono worker left the router (as a regular worker, no bootstrap port) and went idle
    assert [(r["url"], r["worker_type"]) for r in tl["drain"]["removed"]] == [(url, "regular")], tl["drain"]
    assert tl["drain"]["idle"] is True
    assert watch.snapshots[0]["urls"] == [url]
    assert [] in [x["urls"] for x in watch.snapshots], watch.snapshots  # the router listed nobody: out, not hidden
    # gated alone, through a private router that knew only the mono worker, with the verification's checks
    assert tl["gate"]["ok"] and tl["gate"]["verdict"] == "pass", json.dumps(tl["gate"])[:3000]
    gate_file = max(c.reports_dir.glob("rollout-run-*/rollout-*/node1-gate.json"), key=lambda f: f.stat().st_mtime)
    gate = json.loads(gate_file.read_text())["report"]
    assert [w["role"] for w in gate["target"]["workers"]] == ["mono"]
    assert gate["target"]["router"].startswith("http://127.0.0.1:")  # a private router, never the production one
    checks = {x["name"]: x["status"] for x in gate["checks"]}
    assert {n: checks.get(n) for n in ("config", "liveness", "cascade", "recovery", "logs")} == dict.fromkeys(
        ("config", "liveness", "cascade", "recovery", "logs"), "pass"), checks
    # re-added, routing confirmed by the worker's own request counter
    assert tl["readd"]["confirmed"] and tl["readd"]["added"] == [url], tl["readd"]
    assert [w["url"] for w in _listed(c)] == [url]
    window = run.report["window_without_service_s"]["node1"]
    assert window and window > 0
    assert s["cut"] == 0 and s["ok"] > 0, s
    if s["failed"]:  # only in the window without service, and fast: the router's 503, never a hang
        assert s["failed_max_s"] < 5 and set(s["failed_statuses"]) <= {503}, s
        assert tl["removed_begin"] - 1 <= s["failed_window"][0] and s["failed_window"][1] <= tl["readded"] + 5, s
    status = _pdfleet("rollout", "status", "-i", str(c.inventory))
    assert status.returncode == 0 and "nixl-abort-v2" in status.stdout, status.stdout + status.stderr
    print(f"[mono rollout] window without service {window:.1f} s; gate {host['seconds'].get('gated')} s; "
          f"{s['failed']} fast 503s of {s['sent']} requests")


def _watchdog_state(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _pair_state(path: Path) -> str | None:
    return (_watchdog_state(path).get("pairs") or {}).get("node1", {}).get("state")


def test_watchdog_canaries_the_mono_pair_of_one(mono: ScratchCluster, tmp_path: Path) -> None:
    c = mono
    assert c.chat("patched mono, before the watchdog")["usage"]["completion_tokens"] > 0
    state = tmp_path / "state.json"
    interval, deadline = 3.0, 5.0
    dog = subprocess.Popen([str(BIN / "pdfleet"), "watchdog", "run", "-i", str(c.inventory), "--interval",
                            str(interval), "--canary-deadline", str(deadline), "--state-file", str(state)],
                           cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    frozen = False
    try:
        wait_for("the first rounds", lambda: (_watchdog_state(state).get("rounds") or 0) >= 3, 120)
        doc = _watchdog_state(state)
        pair = doc["pairs"]["node1"]
        assert list(doc["pairs"]) == ["node1"] and list(pair["workers"]) == [UNIT], doc
        assert pair["state"] == "OK" and pair["transitions"] == 0 and pair["in_router"] is True, pair
        assert pair["last_latency_s"] is not None and pair["last_success"], pair
        assert pair["workers"][UNIT]["journal"] is not None  # its journal was read over SSH
        print(f"\n[mono watchdog] OK after {doc['rounds']} rounds, canary {pair['last_latency_s']:.2f} s")

        stopped = time.time()
        frozen = c.ssh(f"systemctl kill --signal=SIGSTOP {UNIT}").returncode == 0
        assert frozen
        doc = wait_for("DEAD", lambda: (d := _watchdog_state(state))["pairs"]["node1"]["state"] == "DEAD" and d,
                        120, 0.5)
        dead_at = next(t["at"] for t in doc["transitions"] if t["to"] == "DEAD")
        assert any("mono0" in r for r in doc["pairs"]["node1"]["reasons"]), doc["pairs"]["node1"]
        assert dead_at - stopped <= 2 * deadline + interval + 5.0 + 10.0, doc["transitions"]  # + a /metrics timeout
        c.ssh(f"systemctl kill --signal=SIGCONT {UNIT}")
        frozen = False
        resumed = time.time()
        doc = wait_for("OK again", lambda: (d := _watchdog_state(state)) and any(
            t["to"] == "OK" and t["at"] >= resumed for t in d["transitions"]) and d, 120, 0.5)
        ok_at = next(t["at"] for t in doc["transitions"] if t["to"] == "OK" and t["at"] >= resumed)
        print(f"[mono watchdog] SIGSTOP: DEAD after {dead_at - stopped:.1f} s "
              f"({'; '.join(doc['transitions'][-2]['reasons'])[:200]}); SIGCONT: OK after {ok_at - resumed:.1f} s")
        assert doc["remediation"]["remediations"] == []  # alert mode acts on nothing
    finally:
        if frozen:
            c.ssh(f"systemctl kill --signal=SIGCONT {UNIT}")
        dog.send_signal(signal.SIGTERM)
        out, _ = dog.communicate(timeout=60)
        print(out[-3000:])
    assert dog.returncode == 0, out[-3000:]


def test_watchdog_restart_heals_the_mono_pair_of_one(mono: ScratchCluster) -> None:
    """The watchdog's `restart` remediation with its real steps on the mono instance marked WEDGED: no other
    pair exists, so the one-pair exception lets it act; out of the router, SIGKILL + restart, gate through a
    private router, journal scan over SSH, re-add with routing confirmed."""
    c = mono
    p = plan_inventory(c.inventory)
    pairs = fleet.pairs_from_plan(p)
    model = str(p.model.get("served_name") or p.model["name"])
    router = fleet.RouterClient(p.router_url, c.router_key)
    inv = load_inventory(c.inventory)

    def ssh(host: str, command: str) -> tuple[int, str, str]:
        return remote_run(connection_for(inv, host), command, timeout=120)

    pid_before = c.ssh(f"systemctl show -p MainPID --value {UNIT}").stdout.strip()
    # restarts as the watchdog run with -i makes them: as root or through sudo -n (the sim's operator is not root)
    actions = FleetActions(router, model, p.sglang.get("version"), privileged_ssh(ssh), ssh, startup_timeout_s=300)
    said: list[str] = []
    rem = Remediator("restart", 3, actions, log=said.append)
    trackers = {"node1": PairTracker("node1", state=State.WEDGED)}
    decision = rem.decide("node1", trackers, pairs, {w.spec.url for w in router.workers()})
    assert decision.action == "restart", decision
    t0 = time.monotonic()
    assert rem.act(decision, pairs["node1"], background=False)
    seconds = time.monotonic() - t0
    print(f"\n[mono restart] {seconds:.1f} s: " + " | ".join(said))
    assert rem.to_dict()["remediations"] == [{"host": "node1", "action": "restart", "result": "ok", "count": 1}], said
    assert not rem.left_out
    assert [w.spec.url for w in router.workers()] == pairs["node1"].urls
    assert c.ssh(f"systemctl show -p MainPID --value {UNIT}").stdout.strip() != pid_before
    assert c.chat("after the watchdog's restart of the mono instance")["usage"]["completion_tokens"] > 0


def _with_unreachable_host(c: ScratchCluster, root: Path) -> tuple[Path, str]:
    """A copy of the scratch inventory plus node2, a second mono host at an unused address of the scratch
    bridge (nothing answers there); (inventory, node2's address)."""
    inv = root / "inventory-plus-node2"
    subprocess.run(["cp", "-r", str(c.inventory), str(inv)], check=True)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    members = hosts["all"]["children"]["pdfleet_hosts"]["hosts"]
    address = members["node1"]["ansible_host"].rsplit(".", 1)[0] + ".250"
    members["node2"] = {"ansible_host": address}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    path = inv / "group_vars" / "all" / "cluster.yml"
    model = yaml.safe_load(path.read_text())
    cluster = model["pdfleet_cluster"]
    cluster["hosts"]["node2"] = dict(cluster["hosts"]["node1"])
    cluster["instances"].append({**cluster["instances"][0], "name": "mono1", "host": "node2"})
    path.write_text(yaml.safe_dump(model, sort_keys=False))
    return inv, address


def _lines(text: str, host: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith(f"{host}: ")]


def _timed(timings: dict[str, float], key: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`pdfleet *args`, its seconds kept under ``key`` and its output printed."""
    t0 = time.monotonic()
    proc = _pdfleet(*args)
    timings[key] = time.monotonic() - t0
    print(f"\n[{' '.join(args[:2])}] rc {proc.returncode}\n{proc.stdout}{proc.stderr}")
    return proc


def test_ops_with_one_unreachable_host(mono: ScratchCluster, tmp_path: Path) -> None:
    c = mono
    inv, address = _with_unreachable_host(c, tmp_path)
    env_inv = ["-i", str(inv)]
    timings = {}

    st = _timed(timings, "status", "ops", "status", *env_inv)
    assert st.returncode == 2, st.stdout + st.stderr
    (bad,) = _lines(st.stdout, "node2")
    assert bad.startswith("node2: UNREACHABLE: ") and address in bad and "Traceback" not in st.stdout + st.stderr
    (good,) = _lines(st.stdout, "node1")
    assert good.startswith("node1: ok: ") and "units 2/2 active" in good and "patched=True" in good, good
    assert "in router 1/1" in good, good
    js = _pdfleet("ops", "status", "--json", *env_inv)
    doc = json.loads(js.stdout)
    assert js.returncode == 2 and doc["exit_code"] == 2
    assert {h["host"]: h["code"] for h in doc["hosts"]} == {"node1": 0, "node2": 2}, doc

    can = _timed(timings, "canary", "ops", "canary", *env_inv)
    assert can.returncode == 2, can.stdout + can.stderr
    (bad,) = _lines(can.stdout, "node2")
    assert bad.startswith("node2: UNREACHABLE: no HTTP answer from pdfleet-mono1") and address in bad, bad
    (good,) = _lines(can.stdout, "node1")
    assert good.startswith("node1: ok: canary "), good

    lg = _timed(timings, "logs (node2's unit)", "ops", "logs", "pdfleet-mono1", "--since", "1 hour ago", *env_inv)
    assert lg.returncode == 2 and lg.stdout == "", lg.stdout + lg.stderr
    (bad,) = _lines(lg.stderr, "node2")
    assert bad.startswith("node2: UNREACHABLE: ") and address in bad and "Traceback" not in lg.stderr
    lg = _pdfleet("ops", "logs", UNIT, "--since", "1 hour ago", *env_inv)
    assert lg.returncode == 0 and _lines(lg.stdout, "node1") and not _lines(lg.stdout, "node2"), lg.stderr
    print("[ops] seconds with node2 unreachable: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))

    # drain / undrain of the pair of one (the real inventory): out of the router and idle, back in, confirmed
    url = _mono_url(c)
    dr = _pdfleet("ops", "drain", "node1", "-i", str(c.inventory))
    assert dr.returncode == 0, dr.stdout + dr.stderr
    assert dr.stdout.startswith("node1: ok: 1 worker(s) out of the router"), dr.stdout
    assert _listed(c) == []
    un = _pdfleet("ops", "undrain", "node1", "-i", str(c.inventory))
    assert un.returncode == 0 and "routing confirmed" in un.stdout, un.stdout + un.stderr
    assert [w["url"] for w in _listed(c)] == [url]
    print(f"[ops drain/undrain] {dr.stdout.strip()} / {un.stdout.strip()}")
