"""Unit tests for the watchdog's rules, with fakes (no network, no processes): the state machine, stall
detection, the journal scan, the remediation rules (rate limit, never two, never empty), one whole round, the
metrics and the status command."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pdfleet import fleet, lease
from pdfleet.cli import main
from pdfleet.lease_client import LocalLeases
from pdfleet.watchdog.journal import CURSOR_PREFIX, INVOCATION_PREFIX, JournalWatch
from pdfleet.watchdog.loop import Config, Watchdog
from pdfleet.watchdog.metrics import WatchdogMetrics
from pdfleet.watchdog.observe import DEAD_THREAD_CANARY_S, PairObserver, Probes, Unreachable
from pdfleet.watchdog.progress import PROGRESS_COUNTERS, TRANSFERS_DONE, StallDetector, progress_counters
from pdfleet.watchdog.remediate import Decision, Remediator
from pdfleet.watchdog.state import Observation, PairTracker, State
from prometheus_client import generate_latest


def _pair(host: str) -> fleet.Pair:
    return fleet.Pair(host, (fleet.Member(f"pdfleet-prefill-{host}", "prefill", f"http://{host}:30000", host,
                                          host, 8998),
                             fleet.Member(f"pdfleet-decode-{host}", "decode", f"http://{host}:30001", host, host)))


# --- state machine -------------------------------------------------------------------------------------------

def test_two_failed_canaries_wedge_and_one_success_clears() -> None:
    t = PairTracker("node1", failures_to_wedge=2)
    assert t.update(Observation(canary_ok=True, canary_latency_s=0.4), 100.0) is None
    assert t.state == State.OK and t.last_success == 100.0
    tr = t.update(Observation(canary_ok=False, canary_problem="timed out"), 115.0)
    assert tr is not None and (tr.old, tr.new) == (State.OK, State.DEGRADED) and t.since == 115.0
    tr = t.update(Observation(canary_ok=False, canary_problem="timed out"), 135.0)
    assert tr is not None and tr.new == State.WEDGED and "2 consecutive failed canaries" in tr.reasons[0]
    assert t.update(Observation(canary_ok=False), 155.0) is None and t.since == 135.0  # still WEDGED
    tr = t.update(Observation(canary_ok=True, canary_latency_s=0.5), 170.0)
    assert tr is not None and tr.new == State.OK and t.consecutive_failures == 0 and t.transitions == 3


def test_precedence_dead_over_wedged_over_degraded() -> None:
    t = PairTracker("n", failures_to_wedge=2)
    assert t.classify(Observation(None, unreachable=["p: refused"], stalled=["d: x"]))[0] == State.DEAD
    assert t.classify(Observation(True, stalled=["d: work 1 while flat 70 s"]))[0] == State.WEDGED
    # a dead thread in the journal is conclusive; a transfer error alone is a warning
    assert t.classify(Observation(True, journal=["p: 1 thread_death"], dead_threads=["p: 1 thread_death"]))[0] \
        == State.WEDGED
    assert t.classify(Observation(True, journal=["p: 1 transfer_error"]))[0] == State.DEGRADED
    assert t.classify(Observation(True, unknown=["p: prefill_bootstrap"]))[0] == State.DEGRADED
    assert t.classify(Observation(True))[0] == State.OK


def test_no_canary_round_keeps_the_failure_count() -> None:
    t = PairTracker("n", failures_to_wedge=3)
    t.update(Observation(False), 1.0)
    t.update(Observation(None), 2.0)  # no canary (e.g. unreachable round): neither success nor failure
    assert t.consecutive_failures == 1


# --- stall detection -----------------------------------------------------------------------------------------

def test_stall_needs_work_and_flat_counters_for_longer_than_the_window() -> None:
    d = StallDetector("decode", window_s=60.0)
    tok = "sglang:generation_tokens_total"
    assert not d.observe(0, {tok: 5}, 0).stalled
    assert not d.observe(3, {tok: 5}, 30).stalled  # work appears: the flat clock starts here
    v = d.observe(3, {tok: 5}, 80)
    assert not v.stalled and v.flat_s == 50
    v = d.observe(3, {tok: 5}, 95)
    assert v.stalled and v.flat_s == 65 and "flat for 65 s" in v.describe("decode0")
    assert not d.observe(3, {tok: 6}, 100).stalled  # a token moved: progress


def test_busy_but_moving_never_stalls_and_idle_never_stalls() -> None:
    d = StallDetector("decode", window_s=10.0)
    for i in range(20):
        assert not d.observe(5, {"sglang:generation_tokens_total": i}, i * 15.0).stalled
    d2 = StallDetector("prefill", window_s=10.0)
    for i in range(20):
        assert not d2.observe(0, {"sglang:prompt_tokens_total": 1, "sglang:num_requests_total": 1}, i * 15.0).stalled


def test_prefill_progress_is_its_prompt_or_request_counter() -> None:
    d = StallDetector("prefill", window_s=10.0)
    c = {"sglang:prompt_tokens_total": 10.0, "sglang:num_requests_total": 1.0}
    d.observe(2, c, 0)
    assert not d.observe(2, {**c, "sglang:num_requests_total": 2.0}, 20).stalled
    assert d.observe(2, {**c, "sglang:num_requests_total": 2.0}, 40).stalled


def test_missing_counter_or_restart_resets_the_clock() -> None:
    d = StallDetector("decode", window_s=10.0)
    tok = "sglang:generation_tokens_total"
    d.observe(1, {tok: 100}, 0)
    v = d.observe(1, {}, 50)
    assert not v.stalled and v.missing == [tok]
    d.observe(1, {tok: 100}, 60)
    assert not d.observe(1, {tok: 3}, 100).stalled  # counter went back: the unit restarted


# --- journal ---------------------------------------------------------------------------------------------------

@dataclass
class FakeJournal:
    invocation: str = "aaa"
    lines: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    def __call__(self, host: str, command: str) -> tuple[int, str, str]:
        self.commands.append(command)
        start = 0
        if "--after-cursor" in command:
            start = int(command.split("--after-cursor c", 1)[1].split(";", 1)[0])
        body = self.lines[start:]
        out = [INVOCATION_PREFIX + self.invocation, *body]
        if body:
            out.append(f"{CURSOR_PREFIX}c{len(self.lines)}")
        return 0, "\n".join(out) + "\n", ""


def test_journal_counts_signatures_since_the_unit_started_incrementally() -> None:
    fake = FakeJournal(lines=["INFO ready", "Exception in thread Thread-3 (bootstrap_thread):"])
    watch = JournalWatch(fake)
    uj = watch.scan("node1", "pdfleet-prefill0")
    assert uj.alarming() == {"thread_death": 1} and "_SYSTEMD_INVOCATION_ID" in fake.commands[0]
    fake.lines.append("AssertionError: First message should be b'NixlMsgGuard'. Foreign traffic?")
    uj = watch.scan("node1", "pdfleet-prefill0")
    assert uj.alarming() == {"thread_death": 2}  # only the new line was read and added
    assert "--after-cursor" in fake.commands[1]
    fake.invocation, fake.lines = "bbb", ["INFO ready"]  # restarted: a clean count
    assert watch.scan("node1", "pdfleet-prefill0").alarming() == {}


def test_journal_unreadable_raises_with_host_and_unit() -> None:
    from pdfleet.watchdog.journal import JournalUnavailable

    watch = JournalWatch(lambda h, c: (1, "", "Failed to connect to bus"))
    with pytest.raises(JournalUnavailable, match="pdfleet-decode0 on node2"):
        watch.scan("node2", "pdfleet-decode0")


# --- remediation rules -----------------------------------------------------------------------------------------

@dataclass
class FakeActions:
    members: set[str]
    gate_ok: bool = True
    calls: list[str] = field(default_factory=list)

    def router_members(self) -> set[str]:
        return set(self.members)

    def remove(self, pair: fleet.Pair) -> list[fleet.WorkerSpec]:
        self.calls.append(f"remove {pair.host}")
        gone = [m.spec() for m in pair.members if m.url in self.members]
        self.members -= set(pair.urls)
        return gone

    def restart(self, pair: fleet.Pair) -> None:
        self.calls.append(f"restart {pair.host}")

    def gate(self, pair: fleet.Pair) -> tuple[bool, str]:
        self.calls.append(f"gate {pair.host}")
        return self.gate_ok, "gate says so"

    def readd(self, pair: fleet.Pair, specs: list[fleet.WorkerSpec] | None) -> tuple[bool, str]:
        self.calls.append(f"readd {pair.host}")
        self.members |= set(pair.urls)
        return True, "confirmed"


def _fleet(states: dict[str, State]) -> tuple[dict[str, PairTracker], dict[str, fleet.Pair], set[str]]:
    trackers = {h: PairTracker(h, state=s) for h, s in states.items()}
    pairs = {h: _pair(h) for h in states}
    return trackers, pairs, {u for p in pairs.values() for u in p.urls}


def test_alert_mode_never_acts() -> None:
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    actions = FakeActions(urls)
    r = Remediator("alert", 3, actions)
    d = r.decide("a", trackers, pairs, urls)
    assert d.action == "alert" and not r.act(d, pairs["a"], background=False) and actions.calls == []


def test_restart_runs_the_fleet_steps_in_order() -> None:
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    actions = FakeActions(set(urls))
    r = Remediator("restart", 3, actions, log=lambda m: None)
    d = r.decide("a", trackers, pairs, urls)
    assert d.action == "restart"
    assert r.act(d, pairs["a"], background=False)
    assert actions.calls == ["remove a", "restart a", "gate a", "readd a"]
    assert r.counts[("a", "restart", "ok")] == 1 and r.busy is None and "a" not in r.left_out


def test_never_two_pairs_at_once() -> None:
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.WEDGED, "c": State.OK})
    r = Remediator("restart", 3, FakeActions(set(urls)))
    r.busy = "a"
    d = r.decide("b", trackers, pairs, urls)
    assert d.action == "wait" and "never two" in d.reason
    # act() itself refuses while busy, whatever it was told
    from pdfleet.watchdog.remediate import Decision

    assert r.act(Decision("b", "restart", "forced"), pairs["b"]) is False and r.busy == "a"


def test_never_leave_the_router_without_a_serving_pair() -> None:
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.DEGRADED})
    r = Remediator("restart", 3, FakeActions(set(urls)))
    d = r.decide("a", trackers, pairs, urls)
    assert d.action == "refuse" and "no serving pair" in d.reason
    # b OK but not in the router (drained by someone): still no serving pair left
    trackers["b"].state = State.OK
    d = r.decide("a", trackers, pairs, urls - set(pairs["b"].urls))
    assert d.action == "refuse"
    assert r.decide("a", trackers, pairs, urls).action == "restart"
    assert r.decide("a", trackers, pairs, None).action == "refuse"  # router unreadable: cannot prove it


def test_a_single_pair_cluster_may_restart_its_wedged_pair() -> None:
    trackers, pairs, urls = _fleet({"only": State.WEDGED})
    assert Remediator("restart", 3).decide("only", trackers, pairs, urls).action == "restart"


def test_rate_limit_then_left_out_of_the_router_and_alerting() -> None:
    now = [1000.0]
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    actions = FakeActions(set(urls))
    r = Remediator("restart", 2, actions, clock=lambda: now[0], log=lambda m: None)
    for _ in range(2):
        d = r.decide("a", trackers, pairs, actions.router_members())
        assert d.action == "restart"
        r.act(d, pairs["a"], background=False)
        now[0] += 60
    d = r.decide("a", trackers, pairs, actions.router_members())
    assert d.action == "leave_out"
    r.act(d, pairs["a"], background=False)
    assert actions.calls.count("restart a") == 2 and actions.calls[-1] == "remove a"
    assert not set(pairs["a"].urls) & actions.members and "a" in r.left_out
    assert r.decide("a", trackers, pairs, actions.router_members()).action == "alert"
    # an hour later the window has slid, but a left-out pair waits for a person
    now[0] += 3600
    assert r.decide("a", trackers, pairs, actions.router_members()).action == "alert"
    assert r.reconcile(None, pairs) == [] and "a" in r.left_out  # router unreadable: nothing is assumed
    actions.members |= set(pairs["a"].urls)  # a person put it back (pdfleet ops undrain)
    assert r.reconcile(actions.router_members(), pairs) == ["a"] and not r.left_out
    assert r.decide("a", trackers, pairs, actions.router_members()).action == "restart"


def test_a_restarted_watchdog_keeps_the_restart_limit_and_the_left_out_pairs() -> None:
    """What remediation knows survives the watchdog's own restart (through the state file's document)."""
    now = [1000.0]
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.WEDGED, "c": State.OK})
    actions = FakeActions(set(urls))
    r = Remediator("restart", 2, actions, clock=lambda: now[0], log=lambda m: None)
    for _ in range(2):
        r.act(r.decide("a", trackers, pairs, actions.router_members()), pairs["a"], background=False)
        now[0] += 60
    r.act(r.decide("a", trackers, pairs, actions.router_members()), pairs["a"], background=False)  # leave_out
    r.act(r.decide("b", trackers, pairs, actions.router_members()), pairs["b"], background=False)  # restart 1
    doc = json.loads(json.dumps({"remediation": r.to_dict()}))  # as written to and read from the state file
    fresh = Remediator("restart", 2, actions, clock=lambda: now[0], log=lambda m: None)
    fresh.restore(doc, pairs)
    assert fresh.left_out == {"a"}
    assert fresh.decide("a", trackers, pairs, actions.router_members()).action == "alert"
    assert fresh.recent_restarts("b") == 1
    assert fresh.decide("b", trackers, pairs, actions.router_members()).reason.startswith("restart 2 of at most 2")
    # restarts older than an hour are not carried over; pairs no longer planned are dropped
    now[0] += 3600
    later = Remediator("restart", 2, actions, clock=lambda: now[0], log=lambda m: None)
    later.restore(doc, {"b": pairs["b"]})
    assert later.restarts == {} and later.left_out == set()
    Remediator("restart", 2).restore({"remediation": "garbage"}, pairs)  # a damaged document is ignored


def test_failed_gate_leaves_the_pair_out() -> None:
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    actions = FakeActions(set(urls), gate_ok=False)
    r = Remediator("restart", 3, actions, log=lambda m: None)
    r.act(r.decide("a", trackers, pairs, urls), pairs["a"], background=False)
    assert "readd a" not in actions.calls and "a" in r.left_out
    assert r.counts[("a", "restart", "failed")] == 1


# --- one whole round -------------------------------------------------------------------------------------------

@dataclass
class FakeCluster:
    """Per worker URL: up, /health, work and a token counter; per pair: canary result."""

    wedged: set[str] = field(default_factory=set)
    down: set[str] = field(default_factory=set)
    tokens: float = 0.0

    def probes(self) -> Probes:
        def canary(pair: fleet.Pair, model: str, deadline: float) -> fleet.CanaryResult:
            if pair.host in self.wedged:
                return fleet.CanaryResult(pair.host, False, 0, deadline, "timed out")
            return fleet.CanaryResult(pair.host, True, 200, 0.3, completion_tokens=4)

        def load(url: str, role: str) -> fleet.WorkerLoad:
            host = url.split("//")[1].split(":")[0]
            busy = 2.0 if host in self.wedged else 0.0
            return fleet.WorkerLoad(url, role, {"running": busy, "waiting": 0.0})

        def counters(url: str) -> dict[str, float]:
            if url.split("//")[1].split(":")[0] in self.down:
                raise Unreachable(f"GET {url}/metrics: connection refused")
            return {"sglang:generation_tokens_total": self.tokens, "sglang:prompt_tokens_total": self.tokens,
                    "sglang:num_requests_total": self.tokens}

        return Probes(canary, load, counters, lambda url: True)


def test_rounds_name_the_wedged_pair_export_it_and_write_the_state(tmp_path: Path) -> None:
    now = [0.0]
    cluster = FakeCluster()
    pairs = {h: _pair(h) for h in ("node1", "node2", "node3")}
    metrics = WatchdogMetrics()
    state_file = tmp_path / "state.json"
    dog = Watchdog(pairs, "m", Config(state_file=state_file), None, Remediator("alert"), metrics,
                   cluster.probes(), clock=lambda: now[0], log=lambda m: None)
    dog.round()
    assert {t.state for t in dog.trackers.values()} == {State.OK}
    cluster.wedged.add("node2")
    cluster.down.add("node3")
    for _ in range(2):
        now[0] += 15
        dog.round()
    assert dog.trackers["node2"].state == State.WEDGED and dog.trackers["node1"].state == State.OK
    assert dog.trackers["node3"].state == State.DEAD
    text = generate_latest(metrics.registry).decode()
    assert 'pdfleet_watchdog_pair_state{pair="node2",state="WEDGED"} 1.0' in text
    assert 'pdfleet_watchdog_canary_ok{pair="node2"} 0.0' in text
    assert 'pdfleet_watchdog_worker_up{pair="node3",role="prefill",worker="pdfleet-prefill-node3"} 0.0' in text
    assert 'pdfleet_watchdog_worker_health_ok{pair="node2",role="decode",worker="pdfleet-decode-node2"} 1.0' in text
    doc = json.loads(state_file.read_text())
    assert doc["pairs"]["node2"]["state"] == "WEDGED" and doc["pairs"]["node2"]["since"] == 30.0
    # the stall alone also wedges: canaries pass, but work sits with flat counters past the window
    cluster2 = FakeCluster()
    dog2 = Watchdog({"n": _pair("n")}, "m", Config(stall_window_s=40), None, Remediator("alert"), None,
                    cluster2.probes(), clock=lambda: now[0], log=lambda m: None)
    dog2.probes.load = lambda url, role: fleet.WorkerLoad(url, role, {"running": 1.0})
    dog2.observers["n"].probes = dog2.probes
    for _ in range(4):
        now[0] += 15
        dog2.round()
    assert dog2.trackers["n"].state == State.WEDGED and "stalled" in dog2.trackers["n"].reasons[0]


def test_status_command_reads_the_state_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import time

    now = [time.time()]
    cluster = FakeCluster(wedged={"node2"})
    state_file = tmp_path / "state.json"
    dog = Watchdog({h: _pair(h) for h in ("node1", "node2")}, "m", Config(state_file=state_file), None,
                   Remediator("alert"), None, cluster.probes(), clock=lambda: now[0], log=lambda m: None)
    dog.round()
    dog.round()
    assert main(["watchdog", "status", "--state-file", str(state_file)]) == 1
    out = capsys.readouterr().out
    assert "node2" in out and "WEDGED" in out and "node1" in out
    assert main(["watchdog", "status", "--state-file", str(state_file), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["pairs"]["node2"]["state"] == "WEDGED" and doc["pairs"]["node1"]["state"] == "OK"
    cluster.wedged.clear()
    dog.round()
    assert main(["watchdog", "status", "--state-file", str(state_file)]) == 0
    assert main(["watchdog", "status", "--state-file", str(tmp_path / "none.json")]) == 2
    assert "no watchdog state file" in capsys.readouterr().err


def test_a_pair_whose_remediation_ends_mid_round_is_not_acted_on_again() -> None:
    now = [0.0]
    cluster = FakeCluster(wedged={"a"})
    pairs = {"a": _pair("a"), "b": _pair("b")}
    actions = FakeActions({u for p in pairs.values() for u in p.urls})
    remediator = Remediator("restart", 3, actions, log=lambda m: None)
    dog = Watchdog(pairs, "m", Config(), None, remediator, None, cluster.probes(), clock=lambda: now[0],
                   log=lambda m: None)
    dog._router_urls = lambda: actions.router_members()  # type: ignore[method-assign]
    remediator.busy = "a"  # a restart of a is running when the round starts ...
    dog.trackers["a"].state = State.WEDGED
    real_observe = dog.observers["b"].observe

    def observe_b(at: float, run_canary: bool = True) -> Observation:
        remediator.busy = None  # ... and ends while b is being observed
        return real_observe(at, run_canary)

    dog.observers["b"].observe = observe_b  # type: ignore[method-assign]
    dog.round()
    assert actions.calls == []  # a was not observed this round: no second restart on its old state


def test_a_timed_out_canary_is_not_counted_while_the_whole_pair_moves() -> None:
    """Under a burst the canary waits in the pair's own queue: no answer in time, but every member's progress
    counters moved meanwhile -> busy, not a failure (said in the reasons). With the counters flat (a wedge: the
    decode makes no tokens), or with only one member moving, the same timeout counts."""
    counters = {"pdfleet-prefill-n": 0.0, "pdfleet-decode-n": 0.0}
    moving = {"pdfleet-prefill-n", "pdfleet-decode-n"}
    pair = _pair("n")

    def canary(p: fleet.Pair, model: str, deadline: float) -> fleet.CanaryResult:
        for m in p.members:  # what happens in the pair while the canary waits
            if m.name in moving:
                counters[m.name] += 100.0
        return fleet.CanaryResult(p.host, False, 0, deadline, f"{p.members[-1].name}: POST ...: timed out")

    def read(url: str) -> dict[str, float]:
        name = next(m.name for m in pair.members if m.url == url)
        v = counters[name]
        return {"sglang:generation_tokens_total": v, "sglang:prompt_tokens_total": v, "sglang:num_requests_total": v}

    probes = Probes(canary, lambda url, role: fleet.WorkerLoad(url, role, {"running": 250.0}), read, lambda u: True)
    observer = PairObserver(pair, "m", 20.0, 600.0, probes)
    tracker = PairTracker("n", 2)
    for at in (0.0, 20.0, 40.0):
        obs = observer.observe(at)
        assert obs.canary_ok is None and "busy, not counted" in obs.canary_busy, obs
        assert tracker.update(obs, at) is None and tracker.state == State.OK
    assert "busy, not counted" in tracker.reasons[0]
    moving.discard("pdfleet-prefill-n")  # the prefill stopped: the decode alone moving is not enough
    assert observer.observe(60.0).canary_ok is False
    moving.clear()  # nothing moves: the wedge
    for at in (80.0, 100.0):
        obs = observer.observe(at)
        assert obs.canary_ok is False and not obs.canary_busy
        tracker.update(obs, at)
    assert tracker.state == State.WEDGED


def test_a_busy_canary_is_not_excused_past_the_stall_window() -> None:
    """On a fleet every member keeps moving for other pairs' traffic (the router pairs this decode with other
    hosts' prefills; requests arriving at a wedged prefill move its request counters), so "busy" excuses a
    timed-out canary for at most the stall window; then the timeouts count and the pair is WEDGED. A canary
    that answers ends the excuse, and a new run of busy rounds gets a fresh window."""
    counters = {"pdfleet-prefill-n": 0.0, "pdfleet-decode-n": 0.0}
    answers = {"ok": False}
    pair = _pair("n")

    def canary(p: fleet.Pair, model: str, deadline: float) -> fleet.CanaryResult:
        for m in p.members:
            counters[m.name] += 100.0
        if answers["ok"]:
            return fleet.CanaryResult(p.host, True, 200, 0.4, completion_tokens=16)
        return fleet.CanaryResult(p.host, False, 0, deadline, f"{p.members[-1].name}: POST ...: timed out")

    def read(url: str) -> dict[str, float]:
        v = counters[next(m.name for m in pair.members if m.url == url)]
        return {"sglang:generation_tokens_total": v, "sglang:prompt_tokens_total": v, "sglang:num_requests_total": v}

    probes = Probes(canary, lambda url, role: fleet.WorkerLoad(url, role, {"running": 5.0}), read, lambda u: True)
    observer = PairObserver(pair, "m", 20.0, 60.0, probes)
    tracker = PairTracker("n", 2)
    for at in (0.0, 20.0, 40.0):  # inside the window: excused
        obs = observer.observe(at)
        assert obs.canary_ok is None and obs.canary_busy, obs
        tracker.update(obs, at)
    assert tracker.state == State.OK
    answers["ok"] = True  # an answer ends the run of busy rounds
    assert observer.observe(50.0).canary_ok is True and observer.busy_since is None
    answers["ok"] = False
    for at in (55.0, 75.0, 95.0):  # a fresh window from 55 s
        assert observer.observe(at).canary_ok is None
    states = []
    for at in (115.0, 135.0):  # 60 s and more of busy rounds: counted
        obs = observer.observe(at)
        assert obs.canary_ok is False and not obs.canary_busy and "past the stall window" in obs.canary_problem
        tracker.update(obs, at)
        states.append(tracker.state)
    assert states == [State.DEGRADED, State.WEDGED]


# --- remediation's intent survives the watchdog's own death ----------------------------------------------------

def test_the_intent_is_on_disk_before_the_pair_leaves_the_router_and_cleared_after() -> None:
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    written: list[dict | None] = []
    actions = FakeActions(set(urls))
    r = Remediator("restart", 3, actions, log=lambda m: None)
    r.persist = lambda: written.append(json.loads(json.dumps(r.to_dict()))["intent"])
    real_remove = actions.remove

    def remove(pair: fleet.Pair) -> list[fleet.WorkerSpec]:
        assert written and written[-1] is not None and written[-1]["host"] == "a", written  # intent first
        return real_remove(pair)

    actions.remove = remove  # type: ignore[method-assign]
    r.act(r.decide("a", trackers, pairs, urls), pairs["a"], background=False)
    assert written[0]["action"] == "restart" and written[-1] is None and r.intent is None


def test_a_watchdog_that_died_mid_remediation_is_finished_by_the_next_process() -> None:
    """The bad case: the process stops after taking the pair out; without the intent the next process sees the
    pair OK (it was restarted or is fine) and never puts it back: capacity lost silently."""
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    actions = FakeActions(set(urls))
    dying = Remediator("restart", 3, actions, log=lambda m: None)
    docs: list[dict] = []
    dying.persist = lambda: docs.append(json.loads(json.dumps({"remediation": dying.to_dict()})))
    actions.restart = lambda pair: (_ for _ in ()).throw(SystemExit("killed"))  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        dying.act(dying.decide("a", trackers, pairs, urls), pairs["a"], background=False)
    last_on_disk = next(d for d in reversed(docs) if d["remediation"]["intent"] is not None)
    assert not set(pairs["a"].urls) & actions.members  # the pair is out of the router
    trackers["a"].state = State.OK  # the next process finds it OK: nothing would ever put it back
    fresh_actions = FakeActions(actions.members)
    fresh = Remediator("restart", 3, fresh_actions, log=lambda m: None)
    fresh.restore(last_on_disk, pairs)
    assert fresh.pending is not None and fresh.decide("a", trackers, pairs, fresh_actions.members).action == "none"
    decision = fresh.resume(pairs)
    assert decision is not None and "previous watchdog process" in decision.reason
    fresh.join(10)
    assert fresh_actions.calls == ["remove a", "restart a", "gate a", "readd a"]
    assert set(pairs["a"].urls) <= fresh_actions.members and fresh.intent is None and fresh.pending is None


def test_an_interrupted_leave_out_stays_out_and_a_pair_no_longer_planned_is_dropped() -> None:
    _, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    actions = FakeActions(set(urls))
    r = Remediator("restart", 3, actions, log=lambda m: None)
    r.restore({"remediation": {"intent": {"host": "a", "action": "leave_out", "started": 1.0}}}, pairs)
    assert r.resume(pairs) is not None
    r.join(10)
    assert actions.calls == ["remove a"] and "a" in r.left_out
    gone = Remediator("restart", 3, FakeActions(set(urls)), log=lambda m: None)
    gone.restore({"remediation": {"intent": {"host": "z", "action": "restart", "started": 1.0}}}, pairs)
    assert gone.pending is None and gone.resume(pairs) is None


def test_the_loop_writes_the_intent_at_once_and_a_new_process_resumes_it_on_its_first_round(tmp_path: Path) -> None:
    now = [0.0]
    cluster = FakeCluster()
    pairs = {"a": _pair("a"), "b": _pair("b")}
    state_file = tmp_path / "state.json"
    urls = {u for p in pairs.values() for u in p.urls}
    actions = FakeActions(set(urls))
    seen_on_disk: list[dict] = []
    real_remove = actions.remove

    def remove(pair: fleet.Pair) -> list[fleet.WorkerSpec]:
        seen_on_disk.append(json.loads(state_file.read_text())["remediation"]["intent"])
        return real_remove(pair)

    actions.remove = remove  # type: ignore[method-assign]
    first = Watchdog(pairs, "m", Config(state_file=state_file), None, Remediator("restart", 3, actions), None,
                     cluster.probes(), clock=lambda: now[0], log=lambda m: None)
    first.remediator.act(Decision("a", "restart", "test"), pairs["a"], background=False)
    assert [(i["host"], i["action"]) for i in seen_on_disk] == [("a", "restart")]
    # a process that died mid-remediation left this behind; the next one finishes it on its first round
    doc = json.loads(state_file.read_text())
    doc["remediation"]["intent"] = {"host": "b", "action": "restart", "started": 5.0}
    fresh_actions = FakeActions(set(urls) - set(pairs["b"].urls))
    fresh = Watchdog(pairs, "m", Config(state_file=state_file), None,
                     Remediator("restart", 3, fresh_actions, log=lambda m: None), None, cluster.probes(),
                     clock=lambda: now[0], log=lambda m: None)
    fresh.remediator.restore(doc, pairs)
    fresh.round()
    fresh.remediator.join(10)
    assert fresh_actions.calls == ["remove b", "restart b", "gate b", "readd b"]
    assert json.loads(state_file.read_text())["remediation"]["intent"] is None


def test_a_pair_someone_else_drained_is_never_restarted_or_put_back() -> None:
    """The bad case: a rollout (or ops drain) took the pair out; a watchdog that restarted and re-added it would
    put a half-upgraded pair back in front of users."""
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK, "c": State.OK})
    actions = FakeActions(urls - set(pairs["a"].urls))  # drained by the rollout
    r = Remediator("restart", 3, actions, log=lambda m: None)
    d = r.decide("a", trackers, pairs, actions.router_members())
    assert d.action == "alert" and "did not take out" in d.reason
    assert not r.act(d, pairs["a"], background=False) and actions.calls == []
    actions.members |= set(pairs["a"].urls)  # back in (the rollout re-added it) and still wedged: now it acts
    assert r.decide("a", trackers, pairs, actions.router_members()).action == "restart"


def test_a_thread_death_in_the_journal_names_the_pair_wedged_in_the_round_that_reads_it() -> None:
    """Without waiting for failed canaries (issue 29): the round after the death says WEDGED, even while the
    canary still passes or is excused as busy."""
    now = [0.0]
    cluster = FakeCluster()
    journal = FakeJournal(lines=["INFO ready"])
    pairs = {"a": _pair("a"), "b": _pair("b")}
    dog = Watchdog(pairs, "m", Config(), None, Remediator("alert"), None, cluster.probes(),
                   journal=JournalWatch(journal), clock=lambda: now[0], log=lambda m: None)
    dog.round()
    assert dog.trackers["a"].state == State.OK
    journal.lines += ["Exception in thread Thread-3 (bootstrap_thread):",
                      "AssertionError: First message should be b'NixlMsgGuard'. Foreign traffic?"]
    now[0] += 15
    dog.round()
    assert dog.trackers["a"].state == State.WEDGED, dog.trackers["a"].reasons
    assert dog.trackers["a"].reasons[0].startswith("journal: pdfleet-prefill-a: ") and "thread_death" in \
        dog.trackers["a"].reasons[0]
    assert dog.trackers["a"].consecutive_failures == 0  # no canary failed: the journal alone named it


def test_a_round_that_finds_a_dead_thread_does_not_wait_the_canarys_whole_deadline() -> None:
    """The bad case: the round scanned the journal, then waited the full 20-s canary deadline on the wedged pair
    before the state was known (a pristine wedge named 32-34 s after the frame on the one-host sim). Now that
    pair's canary gets DEAD_THREAD_CANARY_S; the other pair's keeps the configured deadline, and the failed canary
    is still recorded (PdfleetHealthLies reads it)."""
    now = [0.0]
    cluster = FakeCluster()
    journal = FakeJournal(lines=["INFO ready"])
    pairs = {"a": _pair("a"), "b": _pair("b")}
    deadlines: list[tuple[str, float]] = []
    probes = cluster.probes()
    real_canary = probes.canary
    probes.canary = lambda pair, model, deadline: (deadlines.append((pair.host, deadline)),
                                                   real_canary(pair, model, deadline))[1]
    clean = FakeJournal(invocation="bbb", lines=["INFO ready"])  # pair b's units: nothing died there

    def journals(host: str, command: str) -> tuple[int, str, str]:
        return (journal if host == "a" else clean)(host, command)

    dog = Watchdog(pairs, "m", Config(canary_deadline_s=20.0), None, Remediator("alert"), None, probes,
                   journal=JournalWatch(journals), clock=lambda: now[0], log=lambda m: None)
    dog.round()
    assert sorted(deadlines) == [("a", 20.0), ("b", 20.0)]
    journal.lines += ["Exception in thread Thread-3 (bootstrap_thread):",
                      "AssertionError: First message should be b'NixlMsgGuard'. Foreign traffic?"]
    cluster.wedged.add("a")
    deadlines.clear()
    now[0] += 15
    dog.round()
    assert dict(deadlines) == {"a": DEAD_THREAD_CANARY_S, "b": 20.0}
    assert dog.trackers["a"].state == State.WEDGED and dog.trackers["b"].state == State.OK
    assert dog.observers["a"].workers and dog.trackers["a"].consecutive_failures == 1  # the failure is recorded


# --- the pair lease (shared with pdfleet ops and the rollout) --------------------------------------------------

def _leased(tmp_path: Path, actions: FakeActions, logs: list[str] | None = None) -> Remediator:
    """A remediator holding its leases in ``tmp_path`` (real time: the store's expiry is the wall clock)."""
    return Remediator("restart", 3, actions, log=(logs.append if logs is not None else lambda m: None),
                      leases=LocalLeases("watchdog", who="pdfleet-watchdog@gw pid 1", directory=tmp_path))


def test_a_pair_another_actor_holds_is_not_touched_and_the_decision_names_the_holder(tmp_path: Path) -> None:
    """The bad case: `pdfleet ops restart node2` (or a rollout) took the pair a moment before the watchdog decided
    to restart it; without the lease both restart it at once and the watchdog puts back what ops is restarting."""
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    actions, logs = FakeActions(set(urls)), []
    r = _leased(tmp_path, actions, logs=logs)
    d = r.decide("a", trackers, pairs, urls)
    assert d.action == "restart"  # free when the watchdog looked; ops takes it the moment after
    lease.acquire("a", "ops", "restart", who="alice@ctl pid 9", ttl_s=600, directory=tmp_path)
    assert r.act(d, pairs["a"], background=False) is False
    assert actions.calls == [] and r.busy is None and r.intent is None and r.recent_restarts("a") == 0
    assert r.last["a"].action == "wait" and "ops (alice@ctl pid 9) for restart" in r.last["a"].reason
    assert sum("alice@ctl" in m for m in logs) == 1
    # from the next round the decision itself says who holds it, and acting on it changes nothing
    d = r.decide("a", trackers, pairs, urls)
    assert d.action == "wait" and "alice@ctl pid 9" in d.reason and "pdfleet ops undrain a" in d.reason
    assert r.act(d, pairs["a"], background=False) is False and actions.calls == []
    lease.release("a", "ops", who="alice@ctl pid 9", directory=tmp_path)  # ops is done: the watchdog acts
    assert r.act(r.decide("a", trackers, pairs, urls), pairs["a"], background=False)
    assert actions.calls == ["remove a", "restart a", "gate a", "readd a"]
    assert lease.read("a", tmp_path) is None  # released once the pair is back


def test_the_lease_is_held_while_the_pair_is_out_and_kept_for_a_left_out_pair(tmp_path: Path) -> None:
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    actions = FakeActions(set(urls), gate_ok=False)
    r = _leased(tmp_path, actions)
    seen: list[lease.Lease | None] = []
    real_remove = actions.remove

    def remove(pair: fleet.Pair) -> list[fleet.WorkerSpec]:
        seen.append(lease.read("a", tmp_path))
        return real_remove(pair)

    actions.remove = remove  # type: ignore[method-assign]
    r.act(r.decide("a", trackers, pairs, urls), pairs["a"], background=False)
    assert seen[0] is not None and (seen[0].kind, seen[0].purpose) == ("watchdog", "restart")
    assert seen[0].expires is not None
    kept = lease.read("a", tmp_path)  # the gate failed: left out, and the lease kept for a person
    assert "a" in r.left_out and kept is not None and (kept.kind, kept.purpose, kept.expires) == \
        ("watchdog", "left_out", None)
    with pytest.raises(lease.LeaseHeld):  # a rollout does not put it back
        lease.acquire("a", "rollout", "rollout", directory=tmp_path)
    # a person put it back some other way than `pdfleet ops undrain`: reconcile drops the left_out lease
    actions.members |= set(pairs["a"].urls)
    assert r.reconcile(actions.members, pairs) == ["a"] and lease.read("a", tmp_path) is None


def test_the_lease_is_renewed_every_round_while_the_remediation_runs(tmp_path: Path) -> None:
    import time

    _, _, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    r = _leased(tmp_path, FakeActions(set(urls)))
    lease.acquire("a", "watchdog", "restart", who="pdfleet-watchdog@gw pid 1", ttl_s=r.lease_ttl_s,
                  directory=tmp_path, now=time.time() - 60)  # taken a minute ago
    r.busy, r.intent = "a", {"host": "a", "action": "restart", "started": 1000.0}
    first = lease.read("a", tmp_path)
    r.renew()
    renewed = lease.read("a", tmp_path)
    assert first is not None and renewed is not None and renewed.expires is not None
    assert first.expires is not None and renewed.expires > first.expires and renewed.since == first.since


def test_without_a_usable_lease_store_the_watchdog_refuses_to_act_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease.os, "geteuid", lambda: 1000)  # the watchdog's user cannot create the directory
    trackers, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    actions, logs = FakeActions(set(urls)), []
    r = Remediator("restart", 3, actions, log=logs.append,
                   leases=LocalLeases("watchdog", directory=tmp_path / "missing"))
    d = r.decide("a", trackers, pairs, urls)
    assert d.action == "refuse" and "missing" in d.reason and "site.yml --tags watchdog" in d.reason
    assert r.act(Decision("a", "restart", "forced"), pairs["a"], background=False) is False  # act takes it too
    assert actions.calls == [] and r.last["a"].action == "refuse" and "missing" in r.last["a"].reason
    assert any("refuse" in m and "missing" in m for m in logs)


def test_a_restarted_watchdog_takes_its_own_lease_again_but_not_one_another_actor_took(tmp_path: Path) -> None:
    _, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    intent = {"remediation": {"intent": {"host": "a", "action": "restart", "started": 1.0}}}
    lease.acquire("a", "watchdog", "restart", who="pdfleet-watchdog@gw pid 1", ttl_s=300, directory=tmp_path)
    actions = FakeActions(set(urls))
    r = _leased(tmp_path, actions)
    r.restore(intent, pairs)
    assert r.resume(pairs) is not None
    r.join(10)
    assert actions.calls == ["remove a", "restart a", "gate a", "readd a"] and lease.read("a", tmp_path) is None
    # the lease ran out while no watchdog ran, and a person took the pair: the new process leaves it to them
    lease.acquire("a", "ops", "drain", who="bob@ctl pid 3", directory=tmp_path)
    other = FakeActions(set(urls))
    r2 = _leased(tmp_path, other)
    r2.restore(intent, pairs)
    d = r2.resume(pairs)
    assert d is not None and d.action == "wait" and "bob@ctl" in d.reason
    r2.join(10)
    assert other.calls == [] and r2.busy is None and r2.intent is None


def test_a_restarted_watchdog_that_cannot_take_its_lease_keeps_the_intent_until_it_can(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping the intent there would leave a pair the previous process took out of the router out for good."""
    monkeypatch.setattr(lease.os, "geteuid", lambda: 1000)
    _, pairs, urls = _fleet({"a": State.WEDGED, "b": State.OK})
    actions, logs = FakeActions(set(urls)), []
    store = tmp_path / "not-yet"
    r = Remediator("restart", 3, actions, log=logs.append, leases=LocalLeases("watchdog", directory=store))
    r.restore({"remediation": {"intent": {"host": "a", "action": "restart", "started": 1.0}}}, pairs)
    for _ in range(3):  # three rounds: refused, said once
        d = r.resume(pairs)
        assert d is not None and d.action == "refuse" and r.pending is not None and actions.calls == []
    assert sum("refuse" in m for m in logs) == 1, logs
    store.mkdir()
    assert r.resume(pairs) is not None
    r.join(10)
    assert actions.calls == ["remove a", "restart a", "gate a", "readd a"] and r.pending is None


def test_a_prefill_is_busy_only_while_its_kv_transfers_complete() -> None:
    """Real SGLang counts a request aborted in a wedged prefill's bootstrap queue as finished (prompt and request
    counters move), and on a fleet the decode makes tokens for other hosts' prefills: so where the prefill exports
    its completed KV transfers (progress.TRANSFERS_DONE), a timed-out canary is excused as busy only while that
    count moves, and counted at once when it is flat, whatever the other counters do."""
    counters = {"pdfleet-prefill-n": 0.0, "pdfleet-decode-n": 0.0}
    transfers = {"done": 0.0, "moving": True}
    pair = _pair("n")

    def canary(p: fleet.Pair, model: str, deadline: float) -> fleet.CanaryResult:
        for m in p.members:  # aborted requests finish, other prefills feed the decode: these always move
            counters[m.name] += 100.0
        if transfers["moving"]:
            transfers["done"] += 5.0
        return fleet.CanaryResult(p.host, False, 0, deadline, f"{p.members[-1].name}: POST ...: timed out")

    def read(url: str) -> dict[str, float]:
        name = next(m.name for m in pair.members if m.url == url)
        v = counters[name]
        out = {"sglang:generation_tokens_total": v, "sglang:prompt_tokens_total": v, "sglang:num_requests_total": v}
        return out | ({TRANSFERS_DONE: transfers["done"]} if "prefill" in name else {})

    probes = Probes(canary, lambda url, role: fleet.WorkerLoad(url, role, {"running": 50.0}), read, lambda u: True)
    observer = PairObserver(pair, "m", 20.0, 600.0, probes)
    tracker = PairTracker("n", 2)
    obs = observer.observe(0.0)
    assert obs.canary_ok is None and "busy, not counted" in obs.canary_busy, obs  # transfers complete: busy
    tracker.update(obs, 0.0)
    transfers["moving"] = False  # the transfer thread died: nothing completes, the rest still moves
    for at in (20.0, 40.0):
        obs = observer.observe(at)
        assert obs.canary_ok is False and not obs.canary_busy, obs
        tracker.update(obs, at)
    assert tracker.state == State.WEDGED  # two rounds, not the 600 s stall window


def test_a_prefill_exporting_its_transfers_is_judged_on_them_alone() -> None:
    with_transfers = {"sglang:prompt_tokens_total": 1.0, TRANSFERS_DONE: 1.0}
    assert progress_counters("prefill", with_transfers) == (TRANSFERS_DONE,)
    assert progress_counters("prefill", {"sglang:prompt_tokens_total": 1.0}) == PROGRESS_COUNTERS["prefill"]
    assert progress_counters("decode", with_transfers) == PROGRESS_COUNTERS["decode"]
    det = StallDetector("prefill", 30.0)
    for at in (0.0, 20.0, 40.0):  # work present, prompt tokens moving (aborted requests), transfers flat
        verdict = det.observe(3.0, {"sglang:prompt_tokens_total": at, "sglang:num_requests_total": at,
                                    TRANSFERS_DONE: 7.0}, at)
    assert verdict.stalled and verdict.flat_s == 40.0, verdict
