"""One round of signals for one pair: its canary, each member's reachability, ``/health``, work and progress,
and its journal signatures. Every probe is injectable (``Probes``) so the rules can be tested with fakes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdfleet import fleet
from pdfleet.fleet.http import HTTPError, call
from pdfleet.verify.metrics import parse_prometheus
from pdfleet.watchdog.journal import JournalUnavailable, JournalWatch
from pdfleet.watchdog.progress import StallDetector, progress_counters
from pdfleet.watchdog.state import Observation


class Unreachable(Exception):
    """A worker gave no HTTP answer at all."""


def fetch_counters(url: str, timeout_s: float = 5.0) -> dict[str, float]:
    """The worker's ``/metrics`` as name -> value (summed over labels); Unreachable when nothing answered."""
    try:
        status, text = call("GET", url + "/metrics", timeout_s=timeout_s)
    except HTTPError as e:
        raise Unreachable(str(e)) from None
    if status != 200 or not isinstance(text, str):
        return {}
    return parse_prometheus(text)


def health_ok(url: str, timeout_s: float = 5.0) -> bool:
    try:
        return call("GET", url + "/health", timeout_s=timeout_s)[0] == 200
    except HTTPError:
        return False


@dataclass
class Probes:
    canary: Callable[[fleet.Pair, str, float], fleet.CanaryResult] = (
        lambda pair, model, deadline: fleet.pair_canary(pair, model, deadline_s=deadline))
    load: Callable[[str, str], fleet.WorkerLoad] = lambda url, role: fleet.read_load(url, role)
    counters: Callable[[str], dict[str, float]] = fetch_counters
    health: Callable[[str], bool] = health_ok


# The canary's deadline in a round whose journal scan already found a dead thread (see observe()).
DEAD_THREAD_CANARY_S = 3.0


@dataclass
class WorkerSignals:
    """What the last round saw of one member (exported as metrics)."""

    name: str
    role: str
    up: bool = False
    health_ok: bool = False
    work: float = 0.0
    flat_s: float = 0.0
    stalled: bool = False
    journal: dict[str, int] | None = None  # None: not scanned
    journal_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "up": self.up, "health_ok": self.health_ok,
                "work": self.work, "flat_s": round(self.flat_s, 1), "stalled": self.stalled,
                "journal": self.journal, "journal_note": self.journal_note}


@dataclass
class PairObserver:
    """Keeps each member's progress history and journal position between rounds."""

    pair: fleet.Pair
    model: str
    canary_deadline_s: float
    stall_window_s: float
    probes: Probes = field(default_factory=Probes)
    journal: JournalWatch | None = None
    journal_hosts: frozenset[str] | None = None  # hosts whose journal can be read (None: all)
    detectors: dict[str, StallDetector] = field(default_factory=dict)
    workers: dict[str, WorkerSignals] = field(default_factory=dict)
    busy_since: float | None = None  # the first round of the current run of "busy, not counted" canaries

    def _journal(self, m: fleet.Member, sig: WorkerSignals, obs: Observation) -> None:
        if self.journal is None:
            sig.journal_note = "not scanned (no journal source)"
            return
        if self.journal_hosts is not None and m.host not in self.journal_hosts:
            sig.journal_note = f"not scanned (host {m.host} is remote: canary and metrics only)"
            return
        try:
            uj = self.journal.scan(m.host, m.name)
        except JournalUnavailable as e:
            sig.journal_note = str(e)
            return
        sig.journal = dict(uj.counts)
        bad = uj.alarming()
        if bad:
            counts = ", ".join(f"{v} {k}" for k, v in bad.items())
            example = f" (e.g. {uj.examples[0]!r})" if uj.examples else ""
            obs.journal.append(f"{m.name}: {counts} since the unit started{example}")
            if bad.get("thread_death"):
                obs.dead_threads.append(obs.journal[-1])

    def _busy(self, before: dict[str, dict[str, float]]) -> bool:
        """Every member's progress counters moved since ``before`` (read again now): the pair works through a
        queue, so a canary that found no answer in time waited in it, not on a wedge. A wedged pair cannot pass
        where its prefill exports its completed KV transfers (progress.TRANSFERS_DONE): that count stops with the
        transfer thread, whatever other hosts' traffic does to the decode. Without it, a wedged pair passes on a
        fleet (its decode makes tokens for other prefills; requests aborted in its prefill's queue count as
        finished), which the stall window caps. A member whose counters cannot be read counts as not moving."""
        for m in self.pair.members:
            try:
                after = self.probes.counters(m.url)
            except Unreachable:
                return False
            names = progress_counters(m.role, after)  # a prefill's completed KV transfers, where exported
            old = before.get(m.name, {})
            if not any(n in after and n in old and after[n] > old[n] for n in names):
                return False
        return bool(self.pair.members)

    def observe(self, now: float, run_canary: bool = True) -> Observation:
        obs = Observation(canary_ok=None)
        before: dict[str, dict[str, float]] = {}
        for m in self.pair.members:
            sig = self.workers.setdefault(m.name, WorkerSignals(m.name, m.role))
            det = self.detectors.setdefault(m.name, StallDetector(m.role, self.stall_window_s))
            try:
                counters = self.probes.counters(m.url)
            except Unreachable as e:
                sig.up, sig.health_ok, sig.stalled = False, False, False
                obs.unreachable.append(f"{m.name}: {e}")
                det.progress_at = None
                continue
            before[m.name] = counters
            sig.up = True
            sig.health_ok = self.probes.health(m.url)
            load = self.probes.load(m.url, m.role)
            sig.work = sum(load.numbers.values())
            verdict = det.observe(sig.work, counters, now)
            sig.flat_s, sig.stalled = verdict.flat_s, verdict.stalled
            if verdict.stalled:
                obs.stalled.append(verdict.describe(m.name))
            unknown = load.missing + verdict.missing
            if unknown:
                obs.unknown.append(f"{m.name}: {', '.join(unknown)}")
            self._journal(m, sig, obs)
        if run_canary and not obs.unreachable:
            # A dead thread in the journal is conclusive (the round names the pair WEDGED whatever the canary says):
            # the canary then only adds evidence (and PdfleetHealthLies its failure), so the round must not wait
            # its whole deadline on a wedged pair before the state is known.
            deadline = min(self.canary_deadline_s, DEAD_THREAD_CANARY_S) if obs.dead_threads \
                else self.canary_deadline_s
            result = self.probes.canary(self.pair, self.model, deadline)
            obs.canary_ok, obs.canary_latency_s, obs.canary_problem = result.ok, result.latency_s, result.problem
            # A pair whose journal shows a dead thread is not excused as busy: the death is conclusive.
            if not result.ok and result.status == 0 and not obs.dead_threads and self._busy(before):
                # No answer in time, but the whole pair moved meanwhile: busy, not wedged; not counted -- for at
                # most the stall window. On a fleet the members' counters also move for other pairs' traffic
                # (the router pairs this decode with other hosts' prefills; a wedged prefill's request counters
                # still move as the router's requests arrive and are aborted), so "moved" cannot clear a wedge
                # for long: on the sim fleet under client load a wedged pair stayed "busy" for 185 s.
                self.busy_since = now if self.busy_since is None else self.busy_since
                if now - self.busy_since < self.stall_window_s:
                    obs.canary_ok = None
                    obs.canary_busy = (f"canary not answered in {self.canary_deadline_s:g} s while every member "
                                       f"made progress (busy, not counted): {result.problem}")
                else:
                    obs.canary_problem = (f"{result.problem} (every member moved, but the canaries have found no "
                                          f"answer for {now - self.busy_since:.0f} s, past the stall window: counted)")
            else:
                self.busy_since = None
        return obs
