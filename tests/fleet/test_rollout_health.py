"""A rollout asks every pair the router serves with directly before anything else (pdfleet.rollout.health): a
degraded fleet (a worker stopped with SIGSTOP stays in the router) is refused in seconds naming the pair, unless
the operator allows a degraded start; pairs out of the router are not asked (issue 30)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from pdfleet import fleet
from pdfleet.rollout import plan as rp
from pdfleet.rollout.health import Canary, apply_health, check_serving_pairs
from pdfleet.rollout.state import HostState, expected

PATCHED = expected("0.5.15.post1", True)


def _pair(host: str, base: str) -> fleet.Pair:
    return fleet.Pair(host, (fleet.Member(f"pdfleet-prefill-{host}", "prefill", f"{base}:30000", host, host, 8998),
                             fleet.Member(f"pdfleet-decode-{host}", "decode", f"{base}:30001", host, host)))


def _states(membership: list[str]) -> list[HostState]:
    return [HostState(f"node{i}", PATCHED, PATCHED, _pair(f"node{i}", f"http://node{i}"), m)
            for i, m in enumerate(membership, 1)]


def _canary(bad: set[str], asked: list[str]) -> Canary:
    def canary(pair: fleet.Pair, model: str, deadline_s: float) -> fleet.CanaryResult:
        asked.append(pair.host)
        if pair.host in bad:
            return fleet.CanaryResult(pair.host, False, 0, deadline_s, "timed out after 20 s (no first token)")
        return fleet.CanaryResult(pair.host, True, 200, 0.2, "", 4)

    return canary


def test_a_serving_pair_that_fails_its_canary_refuses_the_rollout_naming_it() -> None:
    states, asked = _states(["in", "in", "in"]), []
    plan = rp.build(states)
    apply_health(plan, check_serving_pairs(states, "m", 20, _canary({"node2"}, asked)), allow_degraded=False)
    assert sorted(asked) == ["node1", "node2", "node3"]
    assert plan.refusal.startswith("1 of 3 serving pair(s) failed a direct canary")
    assert "node2: timed out" in plan.refusal and "pdfleet_rollout_allow_degraded=true" in plan.refusal
    assert "REFUSED" in rp.table(plan) and "failed: node2" in rp.table(plan)


def test_a_healthy_fleet_and_an_allowed_degraded_start_are_not_refused() -> None:
    states = _states(["in", "in", "in"])
    healthy = rp.build(states)
    apply_health(healthy, check_serving_pairs(states, "m", 20, _canary(set(), [])), allow_degraded=False)
    assert not healthy.refusal and healthy.to_dict()["pair_health"]["failed"] == {}
    allowed = rp.build(states)
    apply_health(allowed, check_serving_pairs(states, "m", 20, _canary({"node3"}, [])), allow_degraded=True)
    assert not allowed.refusal and "(allowed: pdfleet_rollout_allow_degraded)" in rp.table(allowed)


def test_pairs_out_of_the_router_are_not_asked() -> None:
    states, asked = _states(["in", "out", "in"]), []
    health = check_serving_pairs(states, "m", 20, _canary({"node2"}, asked))
    assert sorted(asked) == ["node1", "node3"] and not health.failed


@pytest.fixture
def stopped_worker() -> Iterator[str]:
    """A worker stopped with SIGSTOP, as the router sees it: its port accepts (the kernel's backlog) and
    nothing ever answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for s in held:
            s.close()
        server.close()


def test_a_stopped_worker_is_named_within_the_canary_deadline(stopped_worker: str) -> None:
    """The real canary against a silent worker fails at its deadline (2 s here), not after a benchmark."""
    pair = fleet.Pair("node2", (fleet.Member("pdfleet-prefill1", "prefill", stopped_worker, "node2", "127.0.0.1",
                                             1),
                                fleet.Member("pdfleet-decode1", "decode", stopped_worker, "node2", "127.0.0.1")))
    states = [HostState("node2", PATCHED, PATCHED, pair, "in")]
    health = check_serving_pairs(states, "m", deadline_s=2.0)
    assert list(health.failed) == ["node2"], health
