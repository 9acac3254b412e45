"""Reading SGLang's ``/metrics`` (Prometheus text format): the PD queue gauges and the abort counters."""

from __future__ import annotations

import math
import re

# Requests sitting in one of these means the PD path has work in flight (idle = all zero).
QUEUE_GAUGES: tuple[str, ...] = (
    "sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:num_prefill_inflight_queue_reqs",
    "sglang:num_decode_prealloc_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
)
# The gauges each role must export for "idle" to mean anything (a gauge it lacks is reported missing).
ROLE_GAUGES: dict[str, tuple[str, ...]] = {
    "prefill": ("sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_prefill_inflight_queue_reqs",
                "sglang:num_running_reqs", "sglang:num_queue_reqs"),
    "decode": ("sglang:num_decode_prealloc_queue_reqs", "sglang:num_decode_transfer_queue_reqs",
               "sglang:num_running_reqs", "sglang:num_queue_reqs"),
    "mono": ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
}
# SGLang's generic failure counters: reported over the protocol, never abort evidence (they also rise on
# the prefill's own aborts and on timeouts; see pdfleet.verify.signatures).
ABORT_COUNTERS: tuple[str, ...] = (
    "sglang:num_aborted_requests_total",
    "sglang:num_bootstrap_failed_reqs_total",
    "sglang:num_transfer_failed_reqs_total",
)
# The subset that counts aborts of requests whose KV handshake/transfer was still pending.
TRANSFER_ABORT_COUNTERS: tuple[str, ...] = (
    "sglang:num_bootstrap_failed_reqs_total",
    "sglang:num_transfer_failed_reqs_total",
)

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Metric name -> sum over all its label sets (ranks, engine types). Comments are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def _lookup(metrics: dict[str, float], name: str) -> float | None:
    """``name``, tolerating the ``_total`` suffix difference between client library versions."""
    if name in metrics:
        return metrics[name]
    alt = name.removesuffix("_total") if name.endswith("_total") else name + "_total"
    return metrics.get(alt)


def queue_depths(metrics: dict[str, float]) -> dict[str, float]:
    """The PD queue gauges this worker exports (absent ones are left out)."""
    out: dict[str, float] = {}
    for name in QUEUE_GAUGES:
        value = _lookup(metrics, name)
        if value is not None:
            out[name] = value
    return out


def missing_gauges(metrics: dict[str, float], role: str) -> list[str]:
    """The queue gauges ``role`` should export that ``metrics`` lacks."""
    return [name for name in ROLE_GAUGES.get(role, ()) if _lookup(metrics, name) is None]


def counter_deltas(before: dict[str, float], after: dict[str, float],
                   names: tuple[str, ...] = ABORT_COUNTERS) -> dict[str, float]:
    """Increase of each counter (a restarted worker's reset counts from zero)."""
    out: dict[str, float] = {}
    for name in names:
        b, a = _lookup(before, name), _lookup(after, name)
        if a is None:
            continue
        b = b or 0.0
        out[name] = a - b if a >= b else a
    return out
