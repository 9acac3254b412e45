"""The fleet scenario (issue 26, item 2): the fleet claims of the docs (docs/development.md lists them) on one
three-host sim fleet (router1 + node1-3, one TP4 prefill/decode pair each), stood up once, pristine, then in this
order, each step starting where the last left the fleet and writing its figures to reports/fleet-scenario.json:

b. a rollout to the patched stack whose SECOND host (node2) fails its isolated gate (the rollout's test knob
   pdfleet_rollout_test_fault_host gives node2's gate a 1 ms liveness deadline): node1 is patched, node2 is rolled
   back to its previous record (pristine), gated and re-added, node3 and router1 are not touched, the run fails
   naming node2 and the step, and client load through the router is served throughout. The gates of this run
   skip the abort cascade (and so the logs, empty without one): node2's previous record is the pristine stack,
   which wedges under any cascade (step d), so a rollback gate with one could never pass.
d. a real wedge: node3 is still pristine (b never reached it); one foreign frame into one rank's bootstrap socket
   of its prefill (the first this machine may reach: reachable_rank) kills that rank's SGLang bootstrap thread
   (pdfleet_sim.testing.realwedge), confirmed by the prefill's journal, under client load through the router; the
   watchdog deployed on router1 (which cannot read node3's journal) names node3 WEDGED within its budget all the
   same (its prefill's completed KV transfers stop), node1 and node2 make no transition, Prometheus
   fires PdfleetPairWedged for node3. Alert mode acts on nothing. Then the operator's watchdog, run from this
   machine with remediation restart as the unprivileged operator (the production path: SSH, sudo, the Vault
   file), names node3 WEDGED from its journal, restarts the pair (drained, gated in isolation, put back), and both
   watchdogs see it OK again.
a. the patch rollout (pristine -> patched) under independent client load through the router (short requests,
   and long ones that outlast the gap between a pair leaving the router and its units stopping): node1 is at
   the target already and skipped, node2, node3 (and router1's venv) are rolled one at a time: 0 failed and 0
   cut requests, each drain found requests in flight on its pair and waited for them, a listing watcher sees
   exactly one pair out at a time and no error, every host at the target and serving, a second rollout
   changes nothing and leaves the router's list alone.
c. kill -9 of node1's prefill: serving again (a streak of requests through the router, one of them served by
   the new prefill process) within the bound the plan computes (restart delay + the prefill's hold-down + start
   budget + router re-admission: tests/sim_faults), then `pdfleet verify` passes on the fleet.
e. an instance renamed (node3's decode2 -> decodeX, same GPUs and port; decodeX -> decodeY on a kept fleet):
   site.yml removes the old unit (drained first), only the planned units exist and run on node3, and the final
   verification play passes.
f. `pdfleet ops restart node2` as the fleet's unprivileged operator (sudo) under client load: new unit processes,
   the pair back in the router, 0 failed requests.
g. a version swap (0.5.15.post1 -> 0.5.23, then back) under client load: the gateway (smg) serves both cohorts for
   a moment, each under its own pairing protocol, and drains the old one: 0 failed and 0 refused (503) requests,
   and a watcher of every decode's requests per prefill never sees a prefill of one version paired with a decode
   of the other.

The fleet is production-shaped: reached as the unprivileged pdfleet-admin with become, host keys checked, workers at
info, the firewall on, and the gateway key from a Vault-encrypted group_vars file (made with `pdfleet keygen |
ansible-vault encrypt_string`) that every playbook and pdfleet command opens with --vault-password-file.

The order puts b before a so that the two rollouts together roll each host once (plus node2's rollback), and d
between them while node3 still runs the pristine stack. Settings are short (the fault catalogue's heartbeat,
restart and router health intervals; one cascade cycle; no benchmark) to keep the scenario inside CI's budget."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fleet.loadgen import Load
from pdfleet.firewall import UCX_PORT_RANGE_ENV, port_range
from pdfleet.fleet import Pair
from pdfleet.fleet.steps import request_counts
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet.verify.signatures import THREAD_DEATH
from pdfleet.versions import PINS
from pdfleet_sim.testing.realwedge import foreign_frame, rank_sockets
from rollout.helpers import ListingWatch, PairingWatch, Run, get_json, rollout
from sim_faults.conftest import START_BUDGET_S, Timing
from sim_faults.test_faults import PREFILL, kill9, main_pid, worker_bound
from sim_fleet.watch import (
    BUDGET_S,
    ROUND_WORK_S,
    ROUTER_HOST,
    deployed_status,
    firing,
    first,
    foreground_watchdog,
    local_status,
    restarts_ok,
    since,
)
from simcluster import BIN, SITE, ScratchCluster, wait_for

from .conftest import Fleet, set_instance_name

pytestmark = [pytest.mark.sim, pytest.mark.slow]

WORKERS = 6  # three pairs
FAULT_HOST = "node2"  # the second host of the rollout order (node1, node2, node3, router1)
WEDGED_HOST = "node3"
STREAK = 3
# b's gates (node1's, node2's and node2's rollback gate): node2's previous record is the pristine stack, which
# wedges under a cascade (step d shows it), so they check config, deep liveness and recovery only (without a
# cascade the workers log nothing at info level, and an empty log is inconclusive: logs skipped too)
NO_CASCADE_GATES = {"pdfleet_rollout_gate_settings": {"skip": ["bench", "cascade", "logs"], "min_abort_events": 0,
                                                      "allow_incomplete": True}}
NO_BENCH = ("-e", "pdfleet_rollout_bench=false")
# a's second client load: requests of LONG_TOKENS tokens (about 12 s at the sim decode's 40 tokens/s), ~18 in
# flight at any moment, so each pair holds some when it leaves the router, longer than the rollout takes from
# the removal to stopping the units: only the drain's wait for idle keeps them whole.
LONG_TOKENS, LONG_RATE = 480, 1.5


def say(msg: str) -> None:
    print(f"[scenario {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pdfleet(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "pdfleet"), *args], capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=REPO_ROOT)


def listed(c: ScratchCluster) -> list[str]:
    return sorted(w["url"] for w in get_json(c.router_url + "/workers")["workers"])


def rollout_status(c: ScratchCluster) -> dict[str, dict[str, Any]]:
    """`pdfleet rollout status --json`, by host (installed record, at_target, membership, serving)."""
    proc = pdfleet("rollout", "status", "-i", str(c.inventory), *c.vault_args, "--json")
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    return {h["host"]: h for h in json.loads(proc.stdout)["hosts"]}


def unit_pids(c: ScratchCluster, host: str) -> dict[str, str]:
    """MainPID of each pdfleet worker unit on ``host``: a unit restarted (or stopped) changes it."""
    out = c.ssh("for u in $(systemctl list-units --type=service --plain --no-legend 'pdfleet-prefill*' "
                "'pdfleet-decode*' | cut -d' ' -f1); do echo \"$u $(systemctl show -p MainPID --value $u)\"; done",
                host=host).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def flat(text: str) -> str:
    """Ansible's callback wraps long messages: compare on single spaces."""
    return " ".join(text.split())


def chat_ok(c: ScratchCluster, prompt: str, timeout: float = 10) -> bool:
    try:
        return c.chat(prompt, timeout=timeout)["usage"]["completion_tokens"] > 0
    except (urllib.error.URLError, OSError, AssertionError, ValueError, KeyError):
        return False


def assert_serving(c: ScratchCluster, what: str) -> None:
    """All workers listed and every pair answering its own canary (a step starts from a serving fleet)."""
    wait_for(f"{what}: the router lists all {WORKERS} workers", lambda: len(listed(c)) == WORKERS, 180)
    wait_for(f"{what}: every pair in the router and answering its canary",
             lambda: (st := rollout_status(c)) and all(st[h]["membership"] == "in" and st[h]["serving"]
                                                        for h in st if st[h]["pair"]) and st, 300, 2.0)
    assert c.chat(f"{what}: in one sentence, what is PCIe?")["usage"]["completion_tokens"] > 0


def timed(fleet: Fleet, step: str) -> Callable[[], float]:
    t0 = time.monotonic()
    say(f"step {step} ...")
    return lambda: round(time.monotonic() - t0, 1)


def run_figures(run: Run) -> dict[str, Any]:
    r = run.report or {}
    return {"rollout_rc": run.rc, "rollout_s": round(run.seconds, 1), "order": r.get("order"),
            "table": r.get("table"), "total_s": r.get("total_s")}


def test_b_second_host_fails_its_gate_and_is_rolled_back(fleet: Fleet) -> None:
    c = fleet.cluster
    elapsed = timed(fleet, "b: rollout whose second host fails its isolated gate")
    assert_serving(c, "before b")
    c.set_model("sglang", apply_patch=True)
    before = rollout_status(c)
    assert not any(h["at_target"] for h in before.values()), before  # pristine everywhere, the target patched
    untouched_pids = unit_pids(c, "node3")
    with Load(c.router_url, c.model, rate=2.0) as load:
        run = rollout(c, *NO_BENCH, "-e", f"pdfleet_rollout_test_fault_host={FAULT_HOST}",
                      "-e", json.dumps(NO_CASCADE_GATES))
    s = load.summary()
    after = rollout_status(c)
    out = flat(run.stdout)
    fleet.step("b", seconds=elapsed(), load=s, **run_figures(run),
               failure=(run.report or {}).get("outcome"), status_after={h: {k: v[k] for k in
                                                                           ("at_target", "membership", "serving")}
                                                                       for h, v in after.items()})
    say(f"b: rollout rc {run.rc} in {run.seconds:.0f} s; load {s}")
    assert run.rc != 0 and run.report is not None, run.stdout[-6000:]
    order = run.report["order"]
    assert order[:2] == ["node1", FAULT_HOST], order
    outcome = run.report["outcome"]
    assert outcome["ok"] is False and outcome["rolled_back"] is True, outcome
    assert outcome["failure"]["host"] == FAULT_HOST and outcome["failure"]["step"] == "gate", outcome
    assert f"{FAULT_HOST}: step gate failed" in out and "rolled back to" in out, run.stdout[-6000:]
    assert "ROLLBACK FAILED" not in out and "later hosts untouched" in out, run.stdout[-6000:]
    tl = run.report["hosts"]
    assert tl["node1"]["timeline"].get("readded"), tl["node1"]
    assert tl[FAULT_HOST]["timeline"].get("failed") and tl[FAULT_HOST]["timeline"].get("rolled_back"), tl[FAULT_HOST]
    for host in order[2:]:  # later hosts untouched: no timeline, same record, same processes
        assert not tl[host]["timeline"], (host, tl[host])
        assert after[host]["installed"] == before[host]["installed"], (host, after[host], before[host])
    assert unit_pids(c, "node3") == untouched_pids
    assert after["node1"]["at_target"] and after["node1"]["serving"], after["node1"]
    # node2: back at its previous record (pristine), in the router and serving
    assert after[FAULT_HOST]["installed"] == before[FAULT_HOST]["installed"], after[FAULT_HOST]
    assert after[FAULT_HOST]["membership"] == "in" and after[FAULT_HOST]["serving"], after[FAULT_HOST]
    assert s["failed"] == 0 and s["cut"] == 0 and s["ok"] > 0, s  # the fleet served throughout
    assert_serving(c, "after b")


def thread_died(c: ScratchCluster, host: str, unit: str, after: float) -> bool:
    """Whether ``unit``'s journal on ``host`` shows a thread's death (the verification's signatures) since epoch
    ``after``."""
    proc = c.ssh(f"journalctl -u {unit} --since @{int(after) - 1} -o cat --no-pager", host=host)
    return any(p.search(line) for line in proc.stdout.splitlines() for p in THREAD_DEATH)


def reachable_rank(c: ScratchCluster, unit: str, address: str, port: int) -> int:
    """The first TP rank of the prefill whose bootstrap socket this machine (an operator of the fleet) may reach.
    SGLang binds each rank's socket on a port the kernel picks from its ephemeral range, which holds the workers'
    UCX range (nixl.ucx_tcp_port_range); the deploy reserves that range (pdfleet.firewall.reserved_ports), but a
    socket bound before the reservation, or on a host that lost it, would be open to the planned peers only (the
    decodes, its only callers in production), so a frame from here would be refused."""
    (prefill,) = [u for u in plan_inventory(c.source).units() if u.name == unit]
    ucx = port_range(prefill.environment.get(UCX_PORT_RANGE_ENV, ""))
    sockets = rank_sockets(address, port)
    for rank, (_, rank_port) in enumerate(sockets):
        if ucx is None or not ucx[0] <= rank_port <= ucx[1]:
            return rank
    raise AssertionError(f"{unit}: every rank's socket {sockets} is inside the UCX range {ucx}: restart it")


def kill_bootstrap_thread(c: ScratchCluster, unit: str, address: str, port: int,
                          tries: int = 3) -> tuple[float, tuple[str, int], int]:
    """One foreign frame into one rank's bootstrap socket (reachable_rank), until the prefill's journal shows the
    thread's death (the watchdog is timed from the frame that killed it, not from one ZMQ failed to deliver); the
    epoch of that frame, the socket and how many frames it took."""
    rank = reachable_rank(c, unit, address, port)
    for frame in range(1, tries + 1):
        sent = time.time()
        rank_socket = foreign_frame(address, port, rank=rank)  # one frame, one rank
        try:
            wait_for(f"{unit}: the bootstrap thread's death in its journal",
                     lambda t=sent: thread_died(c, WEDGED_HOST, unit, t), 20, 1.0)
        except AssertionError:
            say(f"d: frame {frame} to rank {rank} at {rank_socket} left no thread death in {unit}'s journal")
            continue
        return sent, rank_socket, frame
    raise AssertionError(f"{tries} foreign frames into {unit}'s rank {rank} bootstrap socket never killed its thread")


def watchdog_evidence(c: ScratchCluster, host: str, after: float) -> str:
    """What the deployed watchdog said about ``host``'s pair (for a failed wait): its state, reasons and
    transitions since ``after``, and its own journal."""
    doc = deployed_status(c)
    journal = c.ssh(f"journalctl -u pdfleet-watchdog --since @{int(after) - 1} -o cat --no-pager | tail -40",
                    host=ROUTER_HOST).stdout
    return (f"watchdog on {ROUTER_HOST}: {host}: {json.dumps(doc['pairs'].get(host), default=str)}\n"
            f"transitions since the frame: {since(doc, host, after)}\njournal:\n{journal}")


def test_d_real_wedge_named_by_the_deployed_watchdog(fleet: Fleet, tmp_path: Path) -> None:
    c = fleet.cluster
    elapsed = timed(fleet, "d: a real wedge of the pristine SGLang thread")
    assert rollout_status(c)[WEDGED_HOST]["installed"]["patched"] is False  # the pristine stack
    wait_for("deployed watchdog: every pair OK", lambda: deployed_status(c)["ok"], 240, 2.0)
    others = [h for h in fleet.pairs if h != WEDGED_HOST]
    prefill = fleet.pairs[WEDGED_HOST].role("prefill")[0]
    assert prefill.bootstrap_port, prefill
    # under client load through the router: every member of node3's pair keeps receiving work (the gateway pairs
    # across hosts), so only a per-pair progress signal (the prefill's completed KV transfers) keeps its timed-out
    # canaries from being excused as "busy" for the stall window
    with Load(c.router_url, c.model, rate=2.0, deadline_s=30.0) as load:
        time.sleep(5)
        sent, rank_socket, frames = kill_bootstrap_thread(c, prefill.name, prefill.address,
                                                          int(prefill.bootstrap_port))
        try:
            doc = wait_for(f"deployed watchdog: {WEDGED_HOST} WEDGED",
                           lambda: (d := deployed_status(c)) and first(d, WEDGED_HOST, "WEDGED", sent) and d,
                           3 * BUDGET_S, 2.0)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{watchdog_evidence(c, WEDGED_HOST, sent)}") from e
    detect = first(doc, WEDGED_HOST, "WEDGED", sent) - sent
    say(f"d: WEDGED {detect:.1f} s after the frame (budget {BUDGET_S:g} s + {ROUND_WORK_S:g} s of round work): "
        f"{doc['pairs'][WEDGED_HOST]['reasons']}")
    wait_for(f"PdfleetPairWedged firing for {WEDGED_HOST}",
             lambda: firing(fleet.prometheus, "PdfleetPairWedged", WEDGED_HOST), 180, 2.0)
    alert_s = time.time() - sent
    doc = deployed_status(c)
    fleet.step("d", frame_to=f"{rank_socket[0]}:{rank_socket[1]}", frames=frames, load=load.summary(),
               detect_s=round(detect, 1), budget_s=BUDGET_S, alert_firing_s=round(alert_s, 1),
               reasons=doc["pairs"][WEDGED_HOST]["reasons"], other_transitions=[t for h in others
                                                                                for t in since(doc, h, sent)])
    assert detect <= BUDGET_S + ROUND_WORK_S, doc["transitions"]
    assert load.summary()["ok"] > 0, load.summary()  # the other pairs served meanwhile
    assert all(since(doc, h, sent) == [] for h in others), doc["transitions"]
    assert not any(firing(fleet.prometheus, "PdfleetPairWedged", h) for h in others)
    assert doc["remediation"]["remediations"] == []  # alert mode acts on nothing
    # heal it the way the operator's watchdog does: `pdfleet watchdog run -i --remediation restart` from this
    # machine as the unprivileged operator (journal, restart and the pair lease on router1 over SSH through sudo,
    # the gateway key from the Vault file); it names the pair from node3's journal, drains it, restarts its units,
    # gates it in isolation and puts it back
    started = time.time()
    with foreground_watchdog(c, tmp_path, "restart", wait_ok=False) as state:
        try:
            healed = wait_for(f"foreground watchdog: {WEDGED_HOST} WEDGED, restarted, OK",
                              lambda: (d := local_status(state)) and (w := first(d, WEDGED_HOST, "WEDGED", started))
                              and first(d, WEDGED_HOST, "OK", w) and restarts_ok(d, WEDGED_HOST) >= 1 and d,
                              900, 2.0)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{json.dumps(local_status(state), default=str)[-4000:]}") from e
    wedged_at = first(healed, WEDGED_HOST, "WEDGED", started)
    ok_at = first(healed, WEDGED_HOST, "OK", wedged_at)
    named_by = next(t["reasons"] for t in since(healed, WEDGED_HOST, started) if t["to"] == "WEDGED")
    say(f"d: the operator's restart watchdog named {WEDGED_HOST} WEDGED {wedged_at - started:.1f} s after its start "
        f"({named_by}), OK again {ok_at - started:.1f} s after it")
    assert any(r.startswith("journal: ") for r in named_by), named_by  # from node3's journal, over SSH
    assert restarts_ok(healed, WEDGED_HOST) == 1, healed["remediation"]
    assert all(since(healed, h, started) == [] for h in others), healed["transitions"]
    wait_for(f"deployed watchdog: {WEDGED_HOST} OK again",
             lambda: first(deployed_status(c), WEDGED_HOST, "OK", started), 600, 2.0)
    assert_serving(c, "after d")
    fleet.step("d", seconds=elapsed(), restart_watchdog_wedged_s=round(wedged_at - started, 1),
               restart_watchdog_named_by=named_by, ok_again_after_restart_s=round(ok_at - started, 1))


def test_a_patch_rollout_under_load(fleet: Fleet) -> None:
    c = fleet.cluster
    elapsed = timed(fleet, "a: the patch rollout under client load")
    assert_serving(c, "before a")
    c.set_model("sglang", apply_patch=True)
    with (ListingWatch(c.router_url) as watch, Load(c.router_url, c.model) as load,
          Load(c.router_url, c.model, rate=LONG_RATE, max_tokens=LONG_TOKENS) as long_load):
        run = rollout(c, *NO_BENCH)
    s, long_s = load.summary(), long_load.summary()
    load.dump(c.reports_dir / "load-a.json")
    long_load.dump(c.reports_dir / "load-a-long.json")
    after = rollout_status(c)
    r = run.report or {}
    drains = {h: (r.get("hosts", {}).get(h, {}).get("timeline") or {}).get("drain") or {} for h in r.get("order", [])}
    fleet.step("a", load=s, long_load=long_s, **run_figures(run),
               listing={"polls": watch.polls, "fewest": watch.fewest_listed, "errors": watch.errors[:5]},
               drains={h: {k: d.get(k) for k in ("idle_wait_s", "busy_at_start")} for h, d in drains.items()})
    say(f"a: rollout rc {run.rc} in {run.seconds:.0f} s; load {s}; long load {long_s}; listing polls "
        f"{watch.polls}, fewest listed {watch.fewest_listed}, errors {len(watch.errors)}")
    assert s["failed"] == 0 and s["cut"] == 0 and s["ok"] > 0, s
    # the long requests in flight when their pair left the router finish only because the drain waits for them
    assert long_s["failed"] == 0 and long_s["cut"] == 0 and long_s["ok"] > 0, long_s
    assert run.rc == 0 and run.report, run.stdout[-6000:]
    # the report's page beside it, named by the run's output (its client load handed to it afterwards)
    assert run.path is not None and run.path.with_suffix(".html").is_file(), run.path
    assert f"page: {run.path.with_suffix('.html')}" in flat(run.stdout), run.stdout[-3000:]
    page = pdfleet("rollout", "page", str(run.path), "--client-load", str(c.reports_dir / "load-a.json"))
    html = run.path.with_suffix(".html").read_text()
    assert page.returncode == 0 and 'data-missing="client"' not in html and "client-outcomes" in html, page.stderr
    assert [h for h in r["order"] if h in fleet.pairs] == ["node2", "node3"], r["order"]  # node1 since b
    # each drain found requests in flight on its pair and waited for them (so the load above tested the wait)
    assert all(drains[h].get("busy_at_start") for h in ("node2", "node3")), drains
    begins = [r["hosts"][h]["timeline"]["begin"] for h in r["order"]]
    assert begins == sorted(begins), f"the hosts were not rolled in the plan's order {r['order']}: {begins}"
    # the watcher saw the fleet throughout, with exactly one pair (2 workers) out at the worst moment
    assert watch.polls > 0 and watch.errors == [], watch.errors[:5]
    assert watch.fewest_listed == WORKERS - 2, f"fewest workers listed during the rollout: {watch.fewest_listed}"
    assert all(h["at_target"] and h["serving"] is not False for h in after.values()), after
    assert all(after[h]["serving"] for h in fleet.pairs), after
    ids = listed(c)
    again = rollout(c, *NO_BENCH)
    fleet.step("a", second_rollout={"rc": again.rc, "seconds": round(again.seconds, 1), "recap": again.recap()},
               seconds=elapsed())
    assert again.rc == 0 and again.recap() and all(v["changed"] == 0 for v in again.recap().values()), \
        again.stdout[-3000:]
    assert listed(c) == ids


def served_again(c: ScratchCluster, pair: Pair, unit: str, old_pid: int, t0: float, bound: float) -> float:
    """Seconds from t0 until the first of STREAK consecutive completions through the router, one of which the new
    prefill process served (its own request counter moved); AssertionError past the bound."""
    host = pair.host
    (prefill,) = [m for m in pair.members if m.name == unit]
    deadline = t0 + bound
    first_ok: float | None = None
    streak = 0
    counter: float | None = None
    served = False  # the new prefill process served one of this streak's requests
    attempts = 0
    while time.monotonic() < deadline:
        pid = main_pid(c, unit, host)
        if pid in (0, old_pid):
            time.sleep(1.0)
            continue
        start = time.monotonic()
        if streak == 0 or counter is None:  # the new process's counter before this streak's (next) request
            counter = request_counts(pair)[prefill.url]
        attempts += 1
        if chat_ok(c, f"{uuid.uuid4().hex[:8]} after the kill: what is PCIe?"):
            first_ok = start if streak == 0 else first_ok
            streak += 1
            now = request_counts(pair)[prefill.url]
            served |= counter is not None and now is not None and now > counter
            if streak >= STREAK and served:
                assert first_ok is not None
                return first_ok - t0
        else:
            streak, served = 0, False
            time.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
    raise AssertionError(f"{host}: {unit} killed: the fleet was not serving through it again within the bound of "
                         f"{bound:.0f} s ({attempts} requests; its new process {main_pid(c, unit, host) or 'absent'})")


def test_c_kill9_prefill_serves_again_within_the_plans_bound(fleet: Fleet) -> None:
    c = fleet.cluster
    elapsed = timed(fleet, "c: kill -9 of a prefill")
    assert_serving(c, "before c")
    timing = Timing.of(c)
    bound = worker_bound(timing, PREFILL, crash=True)
    prefill = fleet.pairs["node1"].role("prefill")[0]
    assert prefill.name == PREFILL, prefill
    old = main_pid(c, PREFILL, "node1")
    t0 = kill9(c, PREFILL, "node1")
    took = served_again(c, fleet.pairs["node1"], PREFILL, old, t0, bound)
    say(f"c: served through the new prefill {took:.1f} s after kill -9 (bound {bound:.0f} s)")
    fleet.step("c", seconds_to_serve=round(took, 1), bound_s=bound,
               bound_from={"restart_sec": timing.restart_sec, "prefill_hold_down_s": timing.prefill_hold_down_s,
                           "start_budget_s": START_BUDGET_S, "router_readmit_s": timing.router_readmit_s})
    t1 = time.monotonic()
    verify = pdfleet("verify", "-i", str(c.inventory), *c.vault_args, "--cycles", "1", "--skip", "bench",
                     "--report", str(c.reports_dir / "verify-after-kill9.json"))
    fleet.step("c", verify_rc=verify.returncode, verify_s=round(time.monotonic() - t1, 1), seconds=elapsed())
    assert verify.returncode == 0, verify.stdout[-4000:] + verify.stderr[-2000:]


def _unit_files(c: ScratchCluster, host: str) -> set[str]:
    out = c.ssh("cd /etc/systemd/system && ls -1 pdfleet-prefill*.service pdfleet-decode*.service 2>/dev/null",
                host=host).stdout
    return {line.removesuffix(".service") for line in out.split()}


def _active(c: ScratchCluster, host: str) -> set[str]:
    out = c.ssh("systemctl list-units --type=service --state=active --plain --no-legend 'pdfleet-prefill*' "
                "'pdfleet-decode*' | cut -d' ' -f1", host=host).stdout
    return {line.removesuffix(".service") for line in out.split()}


def test_e_renamed_instance_old_unit_removed(fleet: Fleet) -> None:
    c = fleet.cluster
    elapsed = timed(fleet, "e: an instance renamed")
    assert_serving(c, "before e")
    host = "node3"
    (old,) = [m.name.removeprefix("pdfleet-") for m in fleet.pairs[host].members if m.role == "decode"]
    new = "decodeX" if old != "decodeX" else "decodeY"  # decode2 -> decodeX (decodeX -> decodeY on a kept fleet)
    assert _unit_files(c, host) == {"pdfleet-prefill2", f"pdfleet-{old}"}
    set_instance_name(c, old, new)
    t0 = time.monotonic()
    proc = c.playbook(SITE, "-e", json.dumps({"pdfleet_verify_args": ["--cycles", "1", "--skip", "bench"]}),
                      check=False)
    converge_s = round(time.monotonic() - t0, 1)
    files, active = _unit_files(c, host), _active(c, host)
    fleet.step("e", converge_s=converge_s, rc=proc.returncode, unit_files=sorted(files), active=sorted(active))
    say(f"e: site.yml rc {proc.returncode} in {converge_s:.0f} s; {host} units {sorted(files)}")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert f"{host}: removing pdfleet-{old}" in proc.stdout, proc.stdout[-6000:]
    assert files == {"pdfleet-prefill2", f"pdfleet-{new}"}, files
    assert active == files, active
    assert c.ssh(f"test ! -e /etc/pdfleet/pdfleet-{old}.env", host=host).returncode == 0
    report = c.latest_report()
    assert report["ok"], report.get("failures")
    names = {w["name"] for w in report["target"]["workers"]}
    assert f"pdfleet-{new}" in names and f"pdfleet-{old}" not in names, names
    assert_serving(c, "after e")
    fleet.step("e", seconds=elapsed(), verify_verdict=report["verdict"], renamed=[old, new])


def test_f_ops_restart_as_the_unprivileged_operator_under_load(fleet: Fleet) -> None:
    """`pdfleet ops restart` the way production runs it: as the inventory's unprivileged operator (pdfleet-admin,
    sudo for the units), the gateway key from the Vault file, under client load: the pair leaves the router, its
    units restart (new processes), it is gated and put back, and no client request fails."""
    c = fleet.cluster
    elapsed = timed(fleet, "f: pdfleet ops restart as the unprivileged operator, under client load")
    assert_serving(c, "before f")
    host = "node2"
    before, ids = unit_pids(c, host), listed(c)
    with Load(c.router_url, c.model) as load:
        proc = pdfleet("ops", "restart", host, "-i", str(c.inventory), *c.vault_args)
    s, after = load.summary(), unit_pids(c, host)
    fleet.step("f", rc=proc.returncode, load=s, pids_before=before, pids_after=after, seconds=elapsed())
    say(f"f: ops restart {host} rc {proc.returncode}; load {s}; units {before} -> {after}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert len(before) == 2 and set(after) == set(before), (before, after)
    assert all(after[u] not in ("0", before[u]) for u in before), f"{host}: not restarted: {before} -> {after}"
    assert s["failed"] == 0 and s["cut"] == 0 and s["ok"] > 0, s
    assert listed(c) == ids
    assert_serving(c, "after f")
    # the day-2 view as that operator sees it: each worker's gateway state and the gateway's installed version
    status = pdfleet("ops", "status", "-i", str(c.inventory), *c.vault_args)
    assert status.returncode == 0, status.stdout + status.stderr[-2000:]
    text = flat(status.stdout)
    assert f"gateway {PINS['sglang_router_package']} {PINS['sglang_router_version']}" in text, text
    assert text.count("in router 2/2 (ready, ready)") == len(fleet.pairs), text


def _version_swap(fleet: Fleet, step: str, version: str, patch: str) -> None:
    c = fleet.cluster
    c.set_model("sglang", version=version, patch=patch, apply_patch=True)
    plan = pdfleet("rollout", "plan", "-i", str(c.inventory), *c.vault_args)
    assert "split-swap" in plan.stdout, plan.stdout[-3000:]
    with PairingWatch(fleet.pairs) as watch, Load(c.router_url, c.model) as load:
        run = rollout(c, *NO_BENCH)
    s = load.summary()
    load.dump(c.reports_dir / f"load-{step}.json")
    swap = (run.report or {}).get("swap") or {}
    fleet.step(step, load=s, **run_figures(run), swap=swap, pairing={"samples": watch.samples, "paired": watch.paired,
                                                                      "mixed": watch.mixed[:5]})
    say(f"{step}: swap to {version}: rollout rc {run.rc} in {run.seconds:.0f} s; load {s}; swap {swap}; pairing "
        f"{watch.paired} in {watch.samples} samples, mixed {len(watch.mixed)}")
    assert run.rc == 0 and run.report, run.stdout[-6000:]
    assert s["failed"] == 0 and s["cut"] == 0 and s["ok"] > 0, s  # no 503 either: a refusal is a failure
    assert watch.samples > 0 and not watch.mixed, watch.mixed[:5]
    assert any(k == f"{version} > {version}" for k in watch.paired), watch.paired  # the new cohort served
    assert swap.get("gap_s") == 0.0 and swap.get("cohorts"), swap
    after = rollout_status(c)
    assert all(h["at_target"] and h["serving"] is not False for h in after.values()), after


def test_g_version_swap_and_back_under_load_never_pairs_two_versions(fleet: Fleet) -> None:
    elapsed = timed(fleet, "g: a version swap and back under client load")
    assert_serving(fleet.cluster, "before g")
    _version_swap(fleet, "g-up", "0.5.23", "nixl-guard-v2")
    assert_serving(fleet.cluster, "after the swap to 0.5.23")
    _version_swap(fleet, "g-back", "0.5.15.post1", "nixl-abort-v2")
    assert_serving(fleet.cluster, "after g")
    fleet.step("g", seconds=elapsed())
