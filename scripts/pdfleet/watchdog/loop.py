"""The watchdog service: every interval (start to start; a round that overruns is followed at once), observe
every pair in parallel, move its state, export metrics, let the remediator act on WEDGED pairs, and write the
state file."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdfleet import fleet
from pdfleet.watchdog.journal import JournalWatch
from pdfleet.watchdog.metrics import WatchdogMetrics
from pdfleet.watchdog.observe import PairObserver, Probes
from pdfleet.watchdog.remediate import Remediator
from pdfleet.watchdog.state import Observation, PairTracker, State, Transition
from pdfleet.watchdog.statefile import write_state


@dataclass
class Config:
    """The defaults and why (docs/operating.md, "Watchdog"): a wedged pair is named within
    failures_to_wedge x canary_deadline_s + interval_s = 2 x 20 + 15 = 55 s."""

    interval_s: float = 15.0
    canary_deadline_s: float = 20.0
    failures_to_wedge: int = 2
    stall_window_s: float = 60.0
    state_file: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"interval_s": self.interval_s, "canary_deadline_s": self.canary_deadline_s,
                "failures_to_wedge": self.failures_to_wedge, "stall_window_s": self.stall_window_s}


def _say(msg: str) -> None:
    print(f"pdfleet watchdog: {msg}", file=sys.stderr, flush=True)


@dataclass
class Watchdog:
    pairs: Mapping[str, fleet.Pair]
    model: str
    config: Config = field(default_factory=Config)
    router: fleet.RouterClient | None = None
    remediator: Remediator = field(default_factory=Remediator)
    metrics: WatchdogMetrics | None = None
    probes: Probes = field(default_factory=Probes)
    journal: JournalWatch | None = None
    journal_hosts: frozenset[str] | None = None
    clock: Callable[[], float] = time.time
    log: Callable[[str], None] = _say
    trackers: dict[str, PairTracker] = field(default_factory=dict)
    observers: dict[str, PairObserver] = field(default_factory=dict)
    history: list[Transition] = field(default_factory=list)
    rounds: int = 0

    def __post_init__(self) -> None:
        self._router_seen: set[str] | None = None
        self._write_lock = threading.Lock()  # the loop and the remediation thread both write the state file
        if self.config.state_file is not None and self.remediator.persist is None:
            self.remediator.persist = self.persist
        for host, pair in self.pairs.items():
            self.trackers[host] = PairTracker(host, self.config.failures_to_wedge)
            self.observers[host] = PairObserver(pair, self.model, self.config.canary_deadline_s,
                                                self.config.stall_window_s, self.probes, self.journal,
                                                self.journal_hosts)

    def _router_urls(self) -> set[str] | None:
        if self.router is None:
            return None
        try:
            return {w.spec.url for w in self.router.workers()}
        except fleet.RouterError as e:
            self.log(f"router: {e}")
            return None

    def round(self) -> list[Transition]:
        """One round over every pair; the transitions it caused."""
        now = self.clock()
        busy = self.remediator.busy
        hosts = [h for h in self.pairs if h != busy]
        with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as ex:
            futures = {h: ex.submit(self.observers[h].observe, now) for h in hosts}
            observed: dict[str, Observation] = {h: f.result() for h, f in futures.items()}
        # Transitions carry the time the signals were in (after the canaries answered or timed out), not the
        # round's start: that is when the watchdog knows, and what time-to-detect must be measured against.
        known = self.clock()
        router_urls = self._router_urls()
        self._router_seen = router_urls
        self.remediator.reconcile(router_urls, self.pairs)
        self.remediator.renew()
        if self.remediator.pending is not None:
            self.remediator.resume(self.pairs)
        changes = []
        for host, obs in observed.items():
            t = self.trackers[host].update(obs, known)
            if t is not None:
                changes.append(t)
                self.log(f"{host}: {t.old.value} -> {t.new.value}: {'; '.join(t.reasons) or 'all signals clean'}")
        if busy is not None:
            self.trackers[busy].reasons = [f"being remediated ({self.remediator.last[busy].action})"
                                           if busy in self.remediator.last else "being remediated"]
        # Only pairs observed in this round: a pair whose remediation ended during the round still carries the
        # state from before its restart, and must not be acted on again before it is looked at.
        wedged = sorted((h for h, t in self.trackers.items() if t.state == State.WEDGED and h in observed),
                        key=lambda h: self.trackers[h].since)
        for host in wedged:
            decision = self.remediator.decide(host, self.trackers, self.pairs, router_urls)
            previous = self.remediator.last.get(host)
            if previous is None or (previous.action, previous.reason) != (decision.action, decision.reason):
                self.log(f"{host}: remediation: {decision.action}: {decision.reason}")
            self.remediator.act(decision, self.pairs[host])
        self.history.extend(changes)
        self.rounds += 1
        if self.metrics is not None:
            for host, t in self.trackers.items():
                in_router = None if router_urls is None else all(u in router_urls for u in self.pairs[host].urls)
                self.metrics.update_pair(t, observed[host].canary_ok if host in observed else None, in_router,
                                         self.observers[host].workers)
            self.metrics.update_remediations(self.remediator.counts)
            self.metrics.last_round.set(known)
        if self.config.state_file is not None:
            with self._write_lock:
                write_state(self.config.state_file, self.document(known, router_urls))
        return changes

    def persist(self) -> None:
        """Write the state file now (remediation's intent must be on disk before a pair leaves the router)."""
        if self.config.state_file is not None:
            with self._write_lock:
                write_state(self.config.state_file, self.document(self.clock(), self._router_seen))

    def document(self, now: float, router_urls: set[str] | None) -> dict[str, Any]:
        pairs = {}
        for host, t in self.trackers.items():
            pairs[host] = {**t.to_dict(),
                           "in_router": None if router_urls is None
                           else all(u in router_urls for u in self.pairs[host].urls),
                           "workers": {n: w.to_dict() for n, w in self.observers[host].workers.items()}}
        return {"updated": now, "rounds": self.rounds, "config": self.config.to_dict(), "pairs": pairs,
                "remediation": self.remediator.to_dict(),
                "transitions": [t.to_dict() for t in self.history[-50:]]}

    def run(self, stop: threading.Event | None = None, max_rounds: int | None = None) -> None:
        stop = stop or threading.Event()
        self.log(f"watching {len(self.pairs)} pair(s) every {self.config.interval_s:g} s (canary deadline "
                 f"{self.config.canary_deadline_s:g} s, WEDGED after {self.config.failures_to_wedge} failures or "
                 f"{self.config.stall_window_s:g} s stalled; remediation {self.remediator.mode})")
        while not stop.is_set():
            started = time.monotonic()
            self.round()
            if max_rounds is not None and self.rounds >= max_rounds:
                break
            stop.wait(max(0.0, self.config.interval_s - (time.monotonic() - started)))
        self.remediator.join(timeout_s=5.0)
