"""The per-pair state machine: what one round of signals means, with the memory it needs (consecutive canary
failures, the time of the last transition and of the last success).

Precedence, worst first:

* DEAD: a member does not answer HTTP at all (its unit is down or its host unreachable);
* WEDGED: a thread-death signature in a member's journal since its unit started (conclusive: the incident's
  wedge is a dead bootstrap thread; named in the round that reads it, without waiting for failed canaries),
  ``failures_to_wedge`` consecutive failed canaries, or a member stalled (work present while its progress
  counters stayed flat longer than the stall window, ``pdfleet.watchdog.progress``);
* DEGRADED: a failed canary short of ``failures_to_wedge``, a transfer-error signature in a member's journal since
  its unit started, or a number a member does not export (work cannot be judged);
* OK: otherwise.

A canary that got no answer within its deadline while every member's progress counters moved meanwhile is not
counted (``Observation.canary_busy``, kept in the reasons): under a burst the pair's own queue holds it, and the
wedge the canary exists for stops the decode's tokens. Such a round neither fails nor clears the streak.
The excuse lasts at most the stall window (``PairObserver.busy_since``): on a fleet the members also move for other
pairs' traffic.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class State(enum.StrEnum):
    OK = "OK"
    DEGRADED = "DEGRADED"
    WEDGED = "WEDGED"
    DEAD = "DEAD"

    @property
    def code(self) -> int:
        """A number for Prometheus (higher is worse)."""
        return list(State).index(self)


@dataclass
class Observation:
    """One round of signals for one pair. ``canary_ok`` None: no canary ran (e.g. the pair is being restarted)."""

    canary_ok: bool | None
    canary_latency_s: float | None = None
    canary_problem: str = ""
    unreachable: list[str] = field(default_factory=list)  # "member: why"
    stalled: list[str] = field(default_factory=list)  # "member: why"
    journal: list[str] = field(default_factory=list)  # "member: N thread_death ..." (signatures found)
    dead_threads: list[str] = field(default_factory=list)  # "member: N thread_death ..." (a thread died: conclusive)
    unknown: list[str] = field(default_factory=list)  # "member: numbers it does not export"
    canary_busy: str = ""  # the canary found no answer in time while the whole pair made progress (not counted)


@dataclass
class Transition:
    host: str
    old: State
    new: State
    at: float
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "from": self.old.value, "to": self.new.value, "at": self.at,
                "reasons": self.reasons}


@dataclass
class PairTracker:
    """The state of one pair across rounds."""

    host: str
    failures_to_wedge: int = 2
    state: State = State.OK
    since: float = 0.0  # epoch of the last transition (or of the first round)
    consecutive_failures: int = 0
    last_success: float | None = None
    last_latency_s: float | None = None
    reasons: list[str] = field(default_factory=list)
    transitions: int = 0

    def classify(self, obs: Observation) -> tuple[State, list[str]]:
        """The state these signals mean, given the failure streak already counted, and why."""
        if obs.unreachable:
            return State.DEAD, [f"unreachable: {u}" for u in obs.unreachable]
        wedged = [f"journal: {d}" for d in obs.dead_threads] + [f"stalled: {s}" for s in obs.stalled]
        if self.consecutive_failures >= self.failures_to_wedge:
            wedged.insert(0, f"{self.consecutive_failures} consecutive failed canaries "
                             f"(last: {obs.canary_problem or 'no answer'})")
        if wedged:
            return State.WEDGED, wedged
        degraded = ([f"journal: {j}" for j in obs.journal if j not in obs.dead_threads]
                    + [f"not exported: {u}" for u in obs.unknown])
        if self.consecutive_failures:
            degraded.insert(0, f"canary failed ({self.consecutive_failures} of {self.failures_to_wedge} to "
                               f"WEDGED): {obs.canary_problem}")
        if degraded:
            return State.DEGRADED, degraded
        return State.OK, [obs.canary_busy] if obs.canary_busy else []

    def update(self, obs: Observation, now: float) -> Transition | None:
        """Count this round and move to the state it means; the transition, if the state changed."""
        if obs.canary_ok is True:
            self.consecutive_failures = 0
            self.last_success = now
        elif obs.canary_ok is False:
            self.consecutive_failures += 1
        if obs.canary_latency_s is not None:
            self.last_latency_s = obs.canary_latency_s
        new, reasons = self.classify(obs)
        self.reasons = reasons
        if not self.since:
            self.since = now
        if new == self.state:
            return None
        old, self.state, self.since = self.state, new, now
        self.transitions += 1
        return Transition(self.host, old, new, now, reasons)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "state": self.state.value, "since": self.since,
                "consecutive_failures": self.consecutive_failures, "last_success": self.last_success,
                "last_latency_s": self.last_latency_s, "reasons": self.reasons, "transitions": self.transitions}
