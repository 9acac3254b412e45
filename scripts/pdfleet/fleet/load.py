"""What a worker says about its own load, and waiting until it says idle.

Sources, both from the worker itself (the router's own ``load`` vanishes with the worker, so it cannot be
waited on; operations-facts.md):

* ``GET /v1/loads?include=core,disagg,queues&format=json`` (SGLang 0.5.15.post1 and 0.5.23,
  sglang/srt/entrypoints/v1_loads.py): ``loads[].num_running_reqs``, ``num_waiting_reqs`` and, with the
  ``disagg`` section (sglang/srt/managers/load_snapshot.py ``SECTION_FIELDS``), ``disaggregation.
  prefill_bootstrap_queue_reqs``, ``prefill_inflight_queue_reqs``, ``decode_prealloc_queue_reqs``,
  ``decode_transfer_queue_reqs``, ``decode_retracted_queue_reqs``; summed over DP ranks.
* ``GET /metrics`` (``--enable-metrics``, which the planner always sets): the same queues as the
  ``sglang:num_*_queue_reqs`` gauges (used when ``/v1/loads`` lacks the disagg section, as the simulated
  worker's does) and ``sglang:http_requests_active{endpoint,method}`` (sglang/srt/utils/common.py), the
  requests whose HTTP response is not finished yet: a stream still being written counts here after the
  scheduler is done with it. The probe endpoints this module and the router call are left out.

A number that cannot be read is *missing*, and a worker with a missing number is never idle: an unreachable
worker or one that does not export a queue must not be taken for an empty one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pdfleet.fleet.http import HTTPError, call
from pdfleet.verify.metrics import parse_prometheus

LOADS_PATH = "/v1/loads?include=core,disagg,queues&format=json"
# number -> (/v1/loads key inside loads[] or its "disaggregation" section, /metrics gauge)
SOURCES: dict[str, tuple[str, str]] = {
    "running": ("num_running_reqs", "sglang:num_running_reqs"),
    "waiting": ("num_waiting_reqs", "sglang:num_queue_reqs"),
    "prefill_bootstrap": ("disaggregation.prefill_bootstrap_queue_reqs", "sglang:num_prefill_bootstrap_queue_reqs"),
    "prefill_inflight": ("disaggregation.prefill_inflight_queue_reqs", "sglang:num_prefill_inflight_queue_reqs"),
    "decode_prealloc": ("disaggregation.decode_prealloc_queue_reqs", "sglang:num_decode_prealloc_queue_reqs"),
    "decode_transfer": ("disaggregation.decode_transfer_queue_reqs", "sglang:num_decode_transfer_queue_reqs"),
}
HTTP_ACTIVE = "sglang:http_requests_active"
# Requests of pollers, not of users: this module's own, the router's health checks, the verify protocol's.
PROBE_ENDPOINTS = frozenset({"/metrics", "/v1/loads", "/health", "/health_generate", "/ready", "/get_load",
                             "/server_info", "/get_server_info", "/model_info", "/get_model_info", "/v1/models"})
ROLE_NUMBERS: dict[str, tuple[str, ...]] = {
    "prefill": ("running", "waiting", "prefill_bootstrap", "prefill_inflight", "http_active"),
    "decode": ("running", "waiting", "decode_prealloc", "decode_transfer", "http_active"),
    "mono": ("running", "waiting", "http_active"),
}


@dataclass
class WorkerLoad:
    """One reading of one worker. ``idle`` only when every number its role needs was read and is zero."""

    url: str
    role: str
    numbers: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        return not self.missing and not any(self.numbers.values())

    @property
    def busy(self) -> dict[str, float]:
        return {k: v for k, v in self.numbers.items() if v}

    def describe(self) -> str:
        if self.idle:
            return f"{self.url}: idle"
        parts = [f"{k}={v:g}" for k, v in self.busy.items()]
        if self.missing:
            parts.append(f"unknown {', '.join(self.missing)}")
        parts += self.errors
        return f"{self.url}: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "role": self.role, "idle": self.idle, "numbers": self.numbers,
                "missing": self.missing, "errors": self.errors}


def _dig(d: Any, dotted: str) -> float | None:
    for key in dotted.split("."):
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) else None


def from_loads(data: Any) -> dict[str, float]:
    """The numbers ``/v1/loads`` carries, summed over its DP ranks (absent ones are left out)."""
    loads = data.get("loads") if isinstance(data, dict) else None
    if not isinstance(loads, list) or not loads:
        return {}
    out: dict[str, float] = {}
    for name, (key, _) in SOURCES.items():
        values = [_dig(entry, key) for entry in loads]
        if values and all(v is not None for v in values):
            out[name] = sum(v for v in values if v is not None)
    return out


def http_active(text: str) -> float | None:
    """Sum of ``sglang:http_requests_active`` over user endpoints; None when the gauge is not exported."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if not line.startswith(HTTP_ACTIVE + "{") and not line.startswith(HTTP_ACTIVE + " "):
            continue
        seen = True
        labels, _, value = line.rpartition(" ")
        endpoint = ""
        if 'endpoint="' in labels:
            endpoint = labels.split('endpoint="', 1)[1].split('"', 1)[0]
        if endpoint in PROBE_ENDPOINTS:
            continue
        try:
            total += float(value)
        except ValueError:
            continue
    if not seen and f"# TYPE {HTTP_ACTIVE} gauge" in text:
        seen = True  # exported, but no request has been seen yet: zero
    return total if seen else None


def from_metrics(text: str) -> dict[str, float]:
    """The numbers ``/metrics`` carries (absent gauges are left out)."""
    metrics = parse_prometheus(text)
    out = {name: metrics[gauge] for name, (_, gauge) in SOURCES.items() if gauge in metrics}
    active = http_active(text)
    if active is not None:
        out["http_active"] = active
    return out


def read_load(url: str, role: str, timeout_s: float = 5.0) -> WorkerLoad:
    """Read one worker's numbers for its role (``prefill``, ``decode`` or ``mono``)."""
    url = url.rstrip("/")
    load = WorkerLoad(url, role)
    found: dict[str, float] = {}
    try:
        status, data = call("GET", url + LOADS_PATH, timeout_s=timeout_s)
        if status == 200:
            found.update(from_loads(data))
        else:
            load.errors.append(f"/v1/loads answered {status}")
    except HTTPError as e:
        load.errors.append(str(e))
    try:
        status, text = call("GET", url + "/metrics", timeout_s=timeout_s)
        if status == 200 and isinstance(text, str):
            for k, v in from_metrics(text).items():
                found.setdefault(k, v)  # /v1/loads first: the scheduler's own snapshot
        else:
            load.errors.append(f"/metrics answered {status}")
    except HTTPError as e:
        load.errors.append(str(e))
    for name in ROLE_NUMBERS.get(role, ROLE_NUMBERS["mono"]):
        if name in found:
            load.numbers[name] = found[name]
        else:
            load.missing.append(name)
    return load


@dataclass
class IdleResult:
    """How waiting for idle ended: ``idle`` for all, the seconds waited and each worker's last reading;
    ``first``: each worker's first reading (what was in flight when the wait began)."""

    idle: bool
    waited_s: float
    loads: list[WorkerLoad]
    first: list[WorkerLoad] = field(default_factory=list)

    @property
    def busy_at_start(self) -> dict[str, dict[str, float]]:
        """Per worker URL, the nonzero numbers of its first reading: the requests the wait was for."""
        return {w.url: w.busy for w in self.first if w.busy}

    def describe(self) -> str:
        return "; ".join(w.describe() for w in self.loads if not w.idle) or "all idle"

    def to_dict(self) -> dict[str, Any]:
        return {"idle": self.idle, "waited_s": round(self.waited_s, 3), "loads": [w.to_dict() for w in self.loads],
                "busy_at_start": self.busy_at_start}


def wait_idle(workers: Sequence[tuple[str, str]], timeout_s: float, interval_s: float = 0.5,
              settle_reads: int = 2, read: Callable[[str, str], WorkerLoad] | None = None,
              progress: Callable[[IdleResult], None] | None = None) -> IdleResult:
    """Poll ``(url, role)`` workers until each reads idle ``settle_reads`` times in a row, or ``timeout_s``.

    Two reads in a row: a request routed just before the router dropped the worker may not have reached the
    worker's counters at the first read.
    """
    reader = read or (lambda url, role: read_load(url, role))
    t0 = time.monotonic()
    streak = 0
    first: list[WorkerLoad] | None = None
    while True:
        loads = [reader(url, role) for url, role in workers]
        first = loads if first is None else first
        result = IdleResult(all(w.idle for w in loads), time.monotonic() - t0, loads, first)
        if progress is not None:
            progress(result)
        streak = streak + 1 if result.idle else 0
        if streak >= settle_reads:
            return result
        if result.waited_s >= timeout_s:
            return IdleResult(False, result.waited_s, loads, first) if streak else result
        time.sleep(interval_s)
