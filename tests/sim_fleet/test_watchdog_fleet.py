"""Watchdog acceptance on the three-host sim fleet (a scratch copy of inventory/sim-fleet: router1 + node1-3,
one prefill/decode pair per node), pristine stack (apply_patch: false), staged by site.yml's plays up to the
watchdog (tests/sim/watchdog_site.yml).

Two watchdogs watch the fleet: the deployed pdfleet-watchdog.service on router1 (alert mode) names the pair
and feeds Prometheus on router1; remediation `restart` runs in the foreground from this machine with the scratch
inventory (`pdfleet watchdog run -i`, journals and restarts over SSH), because the deployed unit restarts units
on its own host only (docs/operating.md, "Watchdog": where it runs) and router1 has no workers.

1. One pair wedged (one unknown frame to node2's prefill bootstrap sockets) under client load: the deployed
   watchdog names node2 WEDGED within its 55 s budget (from its canaries: it cannot read node2's journal), then the
   foreground one, started after it, names it from the journal in its first round and restarts it; node1 and
   node3 make no transition, PdfleetPairWedged fires for node2; a poller of the router's worker list
   (every 0.5 s) never sees zero fully listed pairs, and client load through the router keeps being served (the
   requests routed to node2 before it was taken out may fail; every request started after node2 was back OK
   succeeds); the restart brings node2 back to OK. Prints time to detect and to recover.
2. A pair that wedges again right after each restart: with --max-restarts 1, node2 is restarted once, then taken
   out of the router and left out; PdfleetPairWedged keeps firing, no further restart, node1 and node3 serve."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from fleet.loadgen import Load
from pdfleet.fleet import Pair, RouterClient, RouterError, pairs_from_plan
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from sim.test_watchdog_sim import WATCHDOG_SITE, foreign_frame
from simcluster import ScratchCluster, scratch_cluster, skip_reason, wait_for

from sim_fleet import watch
from sim_fleet.watch import (
    BUDGET_S,
    INTERVAL_S,
    ROUND_WORK_S,
    first,
    foreground_watchdog,
    local_status,
    restarts_ok,
    since,
)

# long: 13.6 min measured on the shared 2-core machine (staging 306 s, the two tests ~8.5 min). Extra depth: the
# default suite's fleet scenario (tests/scenario, step d) shows the deployed watchdog a real wedge on this fleet and
# its alert firing; the restart remediation under load and the left-out pair are proved only here.
pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.long]

WEDGED_HOST = "node2"
# Under client load the wedged pair's members keep receiving other pairs' traffic, but its prefill's completed KV
# transfers stop, so its timed-out canaries are not excused as "busy" (pdfleet.watchdog.observe): the budget holds
# under load too, plus the round's own work (as the fleet scenario's step d).
LOADED_BUDGET_S = BUDGET_S + ROUND_WORK_S


@dataclass
class Fleet:
    cluster: ScratchCluster
    pairs: dict[str, Pair]
    router: RouterClient
    prometheus: str  # http://router1:9090
    tmp: Path


@pytest.fixture(scope="module")
def pdfleet_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("wdfleet")
    with scratch_cluster(root, source=REPO_ROOT / "inventory" / "sim-fleet") as c:
        c.set_model("sglang", apply_patch=False)
        t0 = time.monotonic()
        c.playbook(WATCHDOG_SITE)  # remediation alert: the deployed watchdog names, Prometheus alerts
        print(f"\nfleet staged (pristine, watchdog + Prometheus on router1): {time.monotonic() - t0:.0f} s")
        c.wait_ready()
        plan = plan_inventory(c.inventory)
        router = RouterClient(plan.router_url, c.router_key)
        yield Fleet(c, pairs_from_plan(plan), router, f"http://{urlsplit(plan.router_url).hostname}:9090", root)


def deployed_status(f: Fleet) -> dict[str, Any]:
    return watch.deployed_status(f.cluster)


def firing(f: Fleet, alert: str, pair: str) -> bool:
    return watch.firing(f.prometheus, alert, pair)


def wedge(f: Fleet, host: str) -> float:
    prefill = f.pairs[host].role("prefill")[0]
    assert prefill.bootstrap_port, prefill
    return foreign_frame(prefill.address, int(prefill.bootstrap_port))


@dataclass
class MembershipPoller:
    """The router's worker list every 0.5 s: how many pairs are fully listed at each poll."""

    router: RouterClient
    pairs: dict[str, Pair]
    polls: list[tuple[float, frozenset[str]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                urls = {w.spec.url for w in self.router.workers()}
                full = frozenset(h for h, p in self.pairs.items() if all(u in urls for u in p.urls))
                self.polls.append((time.time(), full))
            except RouterError as e:
                self.errors.append(str(e))
            self._stop.wait(0.5)

    @contextmanager
    def running(self) -> Iterator[MembershipPoller]:
        t = threading.Thread(target=self._run, daemon=True)
        t.start()
        try:
            yield self
        finally:
            self._stop.set()
            t.join(10)

    def min_full(self) -> int:
        return min(len(full) for _, full in self.polls)

    def first_without(self, host: str, after: float) -> float | None:
        return next((t for t, full in self.polls if t >= after and host not in full), None)


def test_one_wedged_pair_is_named_and_healed_while_the_others_serve(pdfleet_sim: Fleet) -> None:
    """The deployed watchdog (alert mode, on router1: it cannot read node2's journal) names the wedge from its
    canaries under load first; then the foreground watchdog (restart mode, journals over SSH) starts, names it from
    the journal within its first rounds, and heals it. Run the other way round, the foreground restarts the pair
    before the deployed watchdog's second canary and there is no wedge left for it to name."""
    f = pdfleet_sim
    others = [h for h in f.pairs if h != WEDGED_HOST]
    assert len(f.pairs) == 3 and WEDGED_HOST in f.pairs, f.pairs
    wait_for("deployed watchdog: every pair OK", lambda: deployed_status(f)["ok"], 240, 2.0)
    poller = MembershipPoller(f.router, f.pairs)
    with poller.running(), Load(f.cluster.router_url, f.cluster.model, rate=2.0, deadline_s=30.0) as load:
        time.sleep(5)
        sent = wedge(f, WEDGED_HOST)
        deployed = wait_for("deployed watchdog: node2 WEDGED",
                            lambda: (d := deployed_status(f)) and first(d, WEDGED_HOST, "WEDGED", sent) and d,
                            3 * LOADED_BUDGET_S, 2.0)
        detect_deployed = first(deployed, WEDGED_HOST, "WEDGED", sent) - sent
        wait_for("PdfleetPairWedged firing for node2", lambda: firing(f, "PdfleetPairWedged", WEDGED_HOST), 180, 2.0)
        alert_s = time.time() - sent
        started = time.time()
        with foreground_watchdog(f.cluster, f.tmp, "restart", wait_ok=False) as state:
            doc = wait_for("foreground watchdog: node2 WEDGED, restarted, OK",
                           lambda: (d := local_status(state)) and (w := first(d, WEDGED_HOST, "WEDGED", started))
                           and first(d, WEDGED_HOST, "OK", w) and restarts_ok(d, WEDGED_HOST) >= 1 and d, 900, 2.0)
            wedged_at = first(doc, WEDGED_HOST, "WEDGED", started)
            ok_at = first(doc, WEDGED_HOST, "OK", wedged_at)
            assert wedged_at and ok_at
            out_at = poller.first_without(WEDGED_HOST, sent)
            time.sleep(20)  # requests that start after node2 is back must all be served
        deployed = deployed_status(f)
    summary = load.summary()
    after_ok = [o for o in load.outcomes if o.started >= ok_at]
    print(f"[fleet, one pair wedged] deployed watchdog WEDGED {detect_deployed:.1f} s after the frame under load; "
          f"PdfleetPairWedged firing {alert_s:.1f} s after it (budget to WEDGED under load {LOADED_BUDGET_S:g} s)")
    print(f"[fleet, one pair wedged] foreground watchdog, started {started - sent:.1f} s after the frame: WEDGED "
          f"{wedged_at - started:.1f} s after its start (the journal), out of the router "
          f"{(out_at - started) if out_at else float('nan'):.1f} s, OK again {ok_at - started:.1f} s after its start")
    print(f"[fleet, one pair wedged] router polls {len(poller.polls)} (errors {len(poller.errors)}), fewest fully "
          f"listed pairs {poller.min_full()}; load {summary}; after node2 was OK again: "
          f"{sum(o.kind == 'ok' for o in after_ok)}/{len(after_ok)} ok")
    assert detect_deployed <= LOADED_BUDGET_S, deployed["transitions"]
    # the journal's thread death is conclusive: the first round names it (the round's own work aside)
    assert wedged_at - started <= INTERVAL_S + ROUND_WORK_S, doc["transitions"]
    for d in (doc, deployed):
        assert all(since(d, h, sent - 5) == [] for h in others), d["transitions"]
    assert restarts_ok(doc, WEDGED_HOST) == 1, doc["remediation"]
    assert poller.polls and poller.errors == [] and poller.min_full() >= 1, poller.errors
    assert out_at is not None, "node2 was never taken out of the router"
    assert after_ok and all(o.kind == "ok" for o in after_ok), [o for o in after_ok if o.kind != "ok"][:3]
    assert summary["ok"] >= 0.5 * summary["sent"], summary
    wait_for("deployed watchdog: node2 OK again", lambda: deployed_status(f)["ok"], 3 * BUDGET_S, 2.0)
    assert f.cluster.chat("In one sentence, what is PCIe? (after node2's restart)")["usage"]["completion_tokens"] > 0


def test_a_pair_that_wedges_after_each_restart_is_left_out(pdfleet_sim: Fleet) -> None:
    f = pdfleet_sim
    max_restarts = 1
    others = [h for h in f.pairs if h != WEDGED_HOST]
    wait_for("deployed watchdog: every pair OK", lambda: deployed_status(f)["ok"], 240, 2.0)
    poller = MembershipPoller(f.router, f.pairs)
    with (foreground_watchdog(f.cluster, f.tmp, "limit", "--max-restarts", str(max_restarts)) as state,
          poller.running(), Load(f.cluster.router_url, f.cluster.model, rate=2.0, deadline_s=30.0) as load):
        start = time.time()
        wedges = [wedge(f, WEDGED_HOST)]
        deadline = time.monotonic() + 1200
        while True:
            assert time.monotonic() < deadline, local_status(state)
            doc = local_status(state)
            if WEDGED_HOST in doc["remediation"]["left_out"]:
                break
            # re-wedge right after each restart: the pair came back OK after the last frame
            if restarts_ok(doc, WEDGED_HOST) >= len(wedges) and first(doc, WEDGED_HOST, "OK", wedges[-1]):
                wedges.append(wedge(f, WEDGED_HOST))
            time.sleep(1.0)
        left_out_at = time.time()
        time.sleep(3 * INTERVAL_S)  # rounds after the limit: no more restarts, still out
        doc = local_status(state)
        listed = {w.spec.url for w in f.router.workers()}
        wait_for("PdfleetPairWedged still firing for node2", lambda: firing(f, "PdfleetPairWedged", WEDGED_HOST),
                 180, 2.0)
        deployed = deployed_status(f)
        served = f.cluster.chat("In one sentence, what is PCIe? (node2 left out)")
    summary = load.summary()
    after_out = [o for o in load.outcomes if o.started >= left_out_at]
    rem = doc["remediation"]
    print(f"[fleet, re-wedged after each restart, max {max_restarts}/h] frames sent {len(wedges)}; restarts "
          f"{restarts_ok(doc, WEDGED_HOST)}; left out {rem['left_out']} {left_out_at - start:.0f} s after the first "
          f"frame; last decision {rem['last_decisions'].get(WEDGED_HOST)}")
    print(f"[fleet, re-wedged] router polls {len(poller.polls)}, fewest fully listed pairs {poller.min_full()}; "
          f"load {summary}; after node2 was left out: {sum(o.kind == 'ok' for o in after_out)}/{len(after_out)} ok")
    assert restarts_ok(doc, WEDGED_HOST) == max_restarts, rem
    assert restarts_ok(doc, WEDGED_HOST, "leave_out") == 1, rem
    assert len(wedges) == max_restarts + 1
    assert rem["left_out"] == [WEDGED_HOST], rem
    assert not any(u in listed for u in f.pairs[WEDGED_HOST].urls), listed
    assert all(all(u in listed for u in f.pairs[h].urls) for h in others), listed
    assert deployed["pairs"][WEDGED_HOST]["state"] == "WEDGED", deployed["pairs"]
    assert all(deployed["pairs"][h]["state"] == "OK" for h in others), deployed["pairs"]
    assert all(doc["pairs"][h]["state"] == "OK" for h in others), doc["pairs"]
    assert poller.errors == [] and poller.min_full() >= 1
    assert after_out and all(o.kind == "ok" for o in after_out), [o for o in after_out if o.kind != "ok"][:3]
    assert served["usage"]["completion_tokens"] > 0
