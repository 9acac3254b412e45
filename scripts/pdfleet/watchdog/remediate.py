"""Remediation of a WEDGED pair: ``alert`` (default: only the state, the metrics and the alert rules say it)
or ``restart``: take the pair out of the router, restart its units, gate it, put it back, with the rollout's
steps (``pdfleet.fleet``: remove_pair, isolated_gate, readd).

The rules, checked before anything is touched (``Remediator.decide``, pure, tested with fakes):

* never two pairs at once: one remediation runs at a time (in the background; the loop keeps watching the
  others), and a second WEDGED pair waits;
* never leave the router without a serving pair: when other pairs exist, one of them must be OK and listed
  in the router, else nothing is done (a fault that wedges every pair is not cured by restarting them one by
  one, and taking pairs out would turn slow answers into none). A cluster of one pair is the exception: its
  wedged pair serves nothing already, so taking it out cannot make things worse, and a restart is its only way
  back;
* at most ``max_restarts_per_hour`` restarts per pair (sliding hour); after that the pair is taken out of the
  router and left out (no restart), the alert keeps firing, and a person decides (``pdfleet ops undrain``);
* a pair whose gate fails after its restart is left out of the router too;
* a pair out of the router that the watchdog did not take out (a rollout's or a person's drain) is not touched:
  restarting and re-adding it would undo their drain (it alerts; PdfleetPairOutOfRouter fires if it stays out).

What remediation knows outlives the process: the restart times of the last hour and the pairs left out are in
the state file, and a restarted watchdog takes them back (``restore``), so a restart of the watchdog neither
resets the restart limit nor puts a broken pair back. Its intent too: before a pair is taken out of the router,
the remediation under way (host, action, start) is written to the state file at once (``persist``), and cleared
when it ends. A watchdog stopped in between (a deploy restarts it, the host reboots) leaves the intent behind, and
the next process finishes it first (``resume``): a restart is run again from the start (out of the router,
restart, gate, back in), a leave-out takes the pair out again and leaves it out, so a pair is never left out of
the router by a remediation nobody finishes. A left-out pair that a person put back into the router
(``pdfleet ops undrain``) is watched and acted on again from the next round (``reconcile``).

The pair's lease (``pdfleet.lease``, shared with ``pdfleet ops`` and the rollout) is taken before the pair leaves
the router: held by another actor, nothing is done (decision ``wait``, naming the holder); the store cannot be
used (missing, not writable), nothing is done either (decision ``refuse``: closed, never a remediation that could
race a person or a rollout). It is renewed every round while the remediation runs (``renew``; it expires
``lease_ttl_s`` after the last renewal, so a watchdog that died does not hold it forever), released once the pair
is back, and kept without expiry (purpose ``left_out``) for a pair left out: a person's ``pdfleet ops undrain``
puts it back and releases it. A restarted watchdog finishing an intent takes its own lease again.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pdfleet import fleet
from pdfleet.lease import LeaseError, LeaseHeld
from pdfleet.lease_client import Leases
from pdfleet.watchdog.state import PairTracker, State

MODES = ("alert", "restart")
HOUR_S = 3600.0
LEASE_TTL_S = 300.0  # renewed every round (15 s) while a remediation runs


class Actions(Protocol):
    """What remediation does to the cluster (``FleetActions`` for real, fakes in tests)."""

    def router_members(self) -> set[str]: ...
    def remove(self, pair: fleet.Pair) -> list[fleet.WorkerSpec]: ...
    def restart(self, pair: fleet.Pair) -> None: ...
    def gate(self, pair: fleet.Pair) -> tuple[bool, str]: ...
    def readd(self, pair: fleet.Pair, specs: list[fleet.WorkerSpec] | None) -> tuple[bool, str]: ...


@dataclass
class Decision:
    host: str
    action: str  # none | alert | wait | refuse | restart | leave_out
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"host": self.host, "action": self.action, "reason": self.reason}


@dataclass
class Remediator:
    mode: str = "alert"
    max_restarts_per_hour: int = 3
    actions: Actions | None = None
    clock: Callable[[], float] = time.time
    log: Callable[[str], None] = print
    busy: str | None = None
    restarts: dict[str, list[float]] = field(default_factory=dict)
    left_out: set[str] = field(default_factory=set)
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (host, action, result)
    last: dict[str, Decision] = field(default_factory=dict)
    persist: Callable[[], None] | None = None  # writes the state file now (the watchdog's)
    intent: dict[str, Any] | None = None  # the remediation under way: {host, action, started}
    pending: dict[str, Any] | None = None  # an intent a previous process left unfinished (restore -> resume)
    leases: Leases | None = None  # the pair leases (None: not coordinated, as in tests of the rules alone)
    lease_ttl_s: float = LEASE_TTL_S
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _lease_lock: threading.Lock = field(default_factory=threading.Lock)  # renew (loop) vs. the end (remediation)
    _thread: threading.Thread | None = None

    def recent_restarts(self, host: str) -> int:
        now = self.clock()
        kept = [t for t in self.restarts.get(host, []) if now - t < HOUR_S]
        self.restarts[host] = kept
        return len(kept)

    def decide(self, host: str, trackers: Mapping[str, PairTracker], pairs: Mapping[str, fleet.Pair],
               router_urls: set[str] | None) -> Decision:
        """What to do about ``host`` now (nothing is done here)."""
        if trackers[host].state != State.WEDGED:
            return Decision(host, "none", f"state {trackers[host].state.value}")
        if self.mode != "restart":
            return Decision(host, "alert", "remediation mode is alert: the alert rules page a person")
        if host in self.left_out:
            return Decision(host, "alert", "left out of the router after its restarts; a person decides "
                                           "(pdfleet ops undrain once it is fixed)")
        if router_urls is not None and not all(u in router_urls for u in pairs[host].urls):
            return Decision(host, "alert", "not in the router and not taken out by the watchdog: drained by a "
                                           "rollout or a person (pdfleet ops drain); the watchdog never puts back "
                                           "what it did not take out")
        if self.busy is not None:
            return Decision(host, "wait", f"pair {self.busy} is being remediated (never two at once)")
        others = [h for h in pairs if h != host]
        if others:
            if router_urls is None:
                return Decision(host, "refuse", "the router's worker list cannot be read: cannot prove another "
                                                "pair keeps serving")
            serving = [h for h in others if trackers[h].state == State.OK
                       and all(u in router_urls for u in pairs[h].urls)]
            if not serving:
                return Decision(host, "refuse", "no other pair is OK and in the router: acting would leave the "
                                                "router with no serving pair")
        if self.recent_restarts(host) >= self.max_restarts_per_hour:
            if router_urls is not None and not any(u in router_urls for u in pairs[host].urls):
                self.left_out.add(host)
                return Decision(host, "alert", "already out of the router; restart limit reached")
            return self._unless_leased(Decision(host, "leave_out", f"{self.max_restarts_per_hour} restarts in the "
                                                "last hour: taken out of the router and left out, no more restarts"))
        return self._unless_leased(Decision(host, "restart", f"restart {self.recent_restarts(host) + 1} of at most "
                                            f"{self.max_restarts_per_hour} per hour"))

    def _unless_leased(self, decision: Decision) -> Decision:
        """``decision``, or why it cannot be acted on: another actor holds the pair's lease now, or the store cannot
        be read (a look only: act() takes the lease, which is what keeps two actors apart)."""
        if self.leases is None:
            return decision
        try:
            held = self.leases.read(decision.host)
        except (LeaseError, OSError) as e:
            return self._lease_unusable(decision.host, e)
        if held is not None and held.kind != "watchdog" and not held.expired(self.clock()):
            return self._lease_held(LeaseHeld(held, f"taken for {decision.action}"))
        return decision

    @staticmethod
    def _lease_held(e: LeaseHeld) -> Decision:
        return Decision(e.lease.pair, "wait", f"another actor holds the pair, the watchdog does not touch it: {e}")

    @staticmethod
    def _lease_unusable(host: str, e: Exception) -> Decision:
        return Decision(host, "refuse", f"the pair's lease cannot be taken, so nothing is done (the watchdog never "
                                        f"acts without it): {e}")

    def act(self, decision: Decision, pair: fleet.Pair, background: bool = True) -> bool:
        """Start ``decision`` (restart / leave_out); False when nothing was started."""
        previous = self.last.get(decision.host)
        self.last[decision.host] = decision
        if decision.action not in ("restart", "leave_out") or self.actions is None:
            return False
        with self._lock:
            if self.busy is not None:
                return False
            self.busy = decision.host
        refused = self._take_lease(decision)
        if refused is not None:
            self._refused(refused, previous)
            return False
        if decision.action == "restart":
            self.restarts.setdefault(decision.host, []).append(self.clock())
        self.intent = {"host": decision.host, "action": decision.action, "started": self.clock()}
        self._persist()  # on disk before the pair leaves the router
        if background:
            self._thread = threading.Thread(target=self._run, args=(decision, pair), daemon=True,
                                            name=f"remediate-{decision.host}")
            self._thread.start()
        else:
            self._run(decision, pair)
        return True

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self, decision: Decision, pair: fleet.Pair) -> None:
        assert self.actions is not None
        host, action = decision.host, decision.action
        result = "failed"
        try:
            self.log(f"{host}: {action}: {decision.reason}")
            specs = self.actions.remove(pair)
            self.log(f"{host}: out of the router ({len(specs)} worker(s) removed)")
            if action == "leave_out":
                self.left_out.add(host)
                result = "ok"
                return
            self.actions.restart(pair)
            self.log(f"{host}: units restarted; gating")
            ok, why = self.actions.gate(pair)
            if not ok:
                self.left_out.add(host)
                self.log(f"{host}: gate failed, left out of the router: {why}")
                return
            ok, why = self.actions.readd(pair, specs or None)
            if not ok:
                self.left_out.add(host)
                self.log(f"{host}: re-add not confirmed, left out of the router: {why}")
                return
            self.log(f"{host}: back in the router and serving")
            result = "ok"
        except Exception as e:  # a step that could not run: keep the loop alive, say what failed
            self.left_out.add(host)
            self.log(f"{host}: {action} failed, left out of the router: {e}")
        finally:
            self.counts[(host, action, result)] += 1
            with self._lease_lock:  # no renewal can take the lease again after this
                self.intent = None
                if host in self.left_out:
                    self._keep_left_out(host)
                else:
                    self._drop_lease(host)
            self.busy = None
            self._persist()

    def _take_lease(self, decision: Decision) -> Decision | None:
        """Take ``decision.host``'s lease for it; the decision that replaces it when it cannot be taken."""
        if self.leases is None:
            return None
        try:
            self.leases.acquire(decision.host, decision.action, self.lease_ttl_s)
        except LeaseHeld as e:
            return self._lease_held(e)
        except (LeaseError, OSError) as e:
            return self._lease_unusable(decision.host, e)
        return None

    def _refused(self, decision: Decision, previous: Decision | None) -> None:
        if previous is None or (previous.action, previous.reason) != (decision.action, decision.reason):
            self.log(f"{decision.host}: remediation: {decision.action}: {decision.reason}")
        self.last[decision.host] = decision
        self.busy = None

    def _keep_left_out(self, host: str) -> None:
        """Hold the lease of a pair left out until a person puts it back (no expiry)."""
        if self.leases is None:
            return
        try:
            self.leases.acquire(host, "left_out", None)
            self.log(f"{host}: its lease is kept (left_out) until a person puts it back: pdfleet ops undrain {host}")
        except (LeaseError, OSError) as e:
            self.log(f"{host}: left out, but its lease could not be kept: {e}")

    def _drop_lease(self, host: str) -> None:
        if self.leases is None:
            return
        try:
            self.leases.release(host)
        except (LeaseError, OSError) as e:
            self.log(f"{host}: its lease could not be released: {e}")

    def renew(self) -> None:
        """Renew the lease of the remediation under way (every round): it expires lease_ttl_s after this."""
        with self._lease_lock:
            intent, host = self.intent, self.busy
            if self.leases is None or intent is None or host is None or intent.get("host") != host:
                return
            try:
                self.leases.acquire(host, str(intent.get("action")), self.lease_ttl_s)
            except (LeaseError, OSError) as e:
                self.log(f"{host}: the remediation's lease could not be renewed: {e}")

    def _persist(self) -> None:
        if self.persist is not None:
            try:
                self.persist()
            except OSError as e:  # a full disk must not stop the remediation itself; say it
                self.log(f"state file not written: {e}")

    def resume(self, pairs: Mapping[str, fleet.Pair]) -> Decision | None:
        """Finish the remediation a previous watchdog process began and did not end (``pending``, from its state
        file): run it again from the start, in the background. None when there is none (or its pair is no longer
        planned)."""
        pending, self.pending = self.pending, None
        if not pending or pending.get("host") not in pairs or pending.get("action") not in ("restart", "leave_out"):
            return None
        host = str(pending["host"])
        decision = Decision(host, str(pending["action"]),
                            f"finishing the {pending['action']} a previous watchdog process began at "
                            f"{pending.get('started')} and did not end")
        previous = self.last.get(host)
        if previous is None or previous.action != "refuse":  # a retry after a refusal is not said again
            self.log(f"{host}: remediation: {decision.action}: {decision.reason}")
        self.last[host] = decision
        with self._lock:
            if self.busy is not None:
                self.pending = pending
                return None
            self.busy = host
        refused = self._take_lease(decision)
        if refused is not None:
            self._refused(refused, previous)
            if refused.action == "refuse":  # the store cannot be used now: finish it once it can
                self.pending = pending
            else:  # another actor took the pair meanwhile (the lease had run out): it is theirs now
                self._persist()  # the unfinished intent is dropped from the state file
            return refused
        self.intent = dict(pending)
        self._persist()
        self._thread = threading.Thread(target=self._run, args=(decision, pairs[host]), daemon=True,
                                        name=f"remediate-{host}")
        self._thread.start()
        return decision

    def reconcile(self, router_urls: set[str] | None, pairs: Mapping[str, fleet.Pair]) -> list[str]:
        """Forget "left out" for pairs a person put back into the router (every worker listed again); the hosts
        that changed. Nothing changes while the router cannot be read or while the pair is being remediated."""
        if router_urls is None:
            return []
        back = sorted(h for h in self.left_out
                      if h != self.busy and h in pairs and all(u in router_urls for u in pairs[h].urls))
        for host in back:
            self.left_out.discard(host)
            self.log(f"{host}: back in the router (put back by a person): remediation acts on it again")
            if self.leases is not None:
                try:  # a person who put it back without `pdfleet ops undrain`: the left_out lease is done with
                    held = self.leases.read(host)
                    if held is not None and held.kind == "watchdog" and held.purpose == "left_out":
                        self.leases.release(host)
                except (LeaseError, OSError) as e:
                    self.log(f"{host}: its left_out lease could not be released: {e}")
        return back

    def restore(self, doc: dict[str, Any], pairs: Mapping[str, fleet.Pair]) -> None:
        """Take back what a previous watchdog process knew (its state file's ``remediation``): the restart times
        of the last hour and the pairs it left out, for the pairs still in the plan."""
        known = doc.get("remediation") if isinstance(doc, dict) else None
        if not isinstance(known, dict):
            return
        now = self.clock()
        times = known.get("restart_times")
        if isinstance(times, dict):
            for host, stamps in times.items():
                if host in pairs and isinstance(stamps, list):
                    kept = [float(t) for t in stamps if isinstance(t, (int, float)) and now - t < HOUR_S]
                    if kept:
                        self.restarts[host] = kept
        left = known.get("left_out")
        if isinstance(left, list):
            self.left_out |= {h for h in left if isinstance(h, str) and h in pairs}
        intent = known.get("intent")
        if isinstance(intent, dict) and intent.get("host") in pairs:
            self.pending = intent
            self.log(f"{intent['host']}: the previous watchdog process stopped during its {intent.get('action')}: "
                     "finishing it first")
        if self.left_out or self.restarts:
            self.log(f"remediation restored from the previous run: left out {sorted(self.left_out) or 'none'}, "
                     f"restarts in the last hour {({h: len(t) for h, t in sorted(self.restarts.items())})}")

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "max_restarts_per_hour": self.max_restarts_per_hour, "busy": self.busy,
                "intent": self.intent,
                "left_out": sorted(self.left_out),
                "restarts_last_hour": {h: self.recent_restarts(h) for h in self.restarts},
                "restart_times": {h: list(t) for h, t in sorted(self.restarts.items()) if t},
                "remediations": [{"host": h, "action": a, "result": r, "count": n}
                                 for (h, a, r), n in sorted(self.counts.items())],
                "last_decisions": {h: d.to_dict() for h, d in self.last.items()}}
