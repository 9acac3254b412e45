"""The watchdog's Prometheus metrics (prometheus-client), one registry per watchdog.

Per pair: state (one series per state, 1 for the current one, and a numeric code), whether the last canary
passed, its latency, consecutive failures, the last success time, whether the pair is in the router, and
remediations by action and result. Per worker: up, ``/health`` 200, work present, seconds its progress
counters stayed flat, stalled, and journal signatures since its unit started. The alert rules
(ansible/roles/pdfleet_monitoring/files/pdfleet-alerts.yml) are written against these names.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from pdfleet.watchdog.observe import WorkerSignals
from pdfleet.watchdog.state import PairTracker, State

P = "pdfleet_watchdog_"


class WatchdogMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        pair = ["pair"]
        worker = ["pair", "worker", "role"]
        self.state = Gauge(P + "pair_state", "1 for the pair's current state", ["pair", "state"], registry=r)
        self.state_code = Gauge(P + "pair_state_code", "0 OK, 1 DEGRADED, 2 WEDGED, 3 DEAD", pair, registry=r)
        self.canary_ok = Gauge(P + "canary_ok", "1 when the last canary through the pair passed", pair, registry=r)
        self.latency = Gauge(P + "canary_latency_seconds", "latency of the last canary", pair, registry=r)
        self.failures = Gauge(P + "canary_consecutive_failures", "failed canaries in a row", pair, registry=r)
        self.last_success = Gauge(P + "canary_last_success_timestamp_seconds", "epoch of the last passed canary",
                                  pair, registry=r)
        self.in_router = Gauge(P + "pair_in_router", "1 when every member is listed by the router", pair,
                               registry=r)
        self.remediations = Counter(P + "remediations", "remediations by action and result",
                                    ["pair", "action", "result"], registry=r)
        self.up = Gauge(P + "worker_up", "1 when the worker answers HTTP", worker, registry=r)
        self.health = Gauge(P + "worker_health_ok", "1 when the worker's /health answers 200", worker, registry=r)
        self.work = Gauge(P + "worker_work", "requests running, queued or in PD queues", worker, registry=r)
        self.flat = Gauge(P + "worker_progress_flat_seconds", "seconds with work and flat progress counters",
                          worker, registry=r)
        self.stalled = Gauge(P + "worker_stalled", "1 when work is present and progress stalled", worker,
                             registry=r)
        self.journal = Gauge(P + "worker_journal_signatures", "signature lines since the unit started",
                             ["pair", "worker", "role", "category"], registry=r)
        self.last_round = Gauge(P + "last_round_timestamp_seconds", "epoch of the last completed round",
                                registry=r)
        self._seen: dict[tuple[str, str, str], float] = {}

    def serve(self, port: int, address: str) -> None:
        start_http_server(port, addr=address, registry=self.registry)

    def update_pair(self, t: PairTracker, canary_ok: bool | None, in_router: bool | None,
                    workers: Mapping[str, WorkerSignals]) -> None:
        for s in State:
            self.state.labels(t.host, s.value).set(1 if s == t.state else 0)
        self.state_code.labels(t.host).set(t.state.code)
        if canary_ok is not None:
            self.canary_ok.labels(t.host).set(1 if canary_ok else 0)
        if t.last_latency_s is not None:
            self.latency.labels(t.host).set(t.last_latency_s)
        self.failures.labels(t.host).set(t.consecutive_failures)
        if t.last_success is not None:
            self.last_success.labels(t.host).set(t.last_success)
        if in_router is not None:
            self.in_router.labels(t.host).set(1 if in_router else 0)
        for w in workers.values():
            labels = (t.host, w.name, w.role)
            self.up.labels(*labels).set(1 if w.up else 0)
            self.health.labels(*labels).set(1 if w.health_ok else 0)
            self.work.labels(*labels).set(w.work)
            self.flat.labels(*labels).set(w.flat_s)
            self.stalled.labels(*labels).set(1 if w.stalled else 0)
            for cat, n in (w.journal or {}).items():
                self.journal.labels(*labels, cat).set(n)

    def update_remediations(self, counts: Mapping[tuple[str, str, str], int]) -> None:
        """Counters only go up: add what is new since the last call."""
        for key, n in counts.items():
            delta = n - self._seen.get(key, 0)
            if delta > 0:
                self.remediations.labels(*key).inc(delta)
                self._seen[key] = n
