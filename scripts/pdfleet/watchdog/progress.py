"""Forward progress from a worker's own metrics: work present while its progress counters stay flat for longer
than the stall window means the worker is stalled.

*Work* is what ``pdfleet.fleet.read_load`` reads (running, waiting, the PD bootstrap/inflight/prealloc/transfer
queues, user HTTP requests still open). *Progress* is a per-role set of counters (``sglang:*_total``):

* decode and mono: ``sglang:generation_tokens_total``, tokens actually produced;
* prefill: ``sglang:kv_transfer_latency_ms_count`` (TRANSFERS_DONE) where the worker exports it (SGLang with
  ``--enable-metrics``: its prefill observes the KV transfer latency once per transfer that succeeded, never for
  an aborted request nor for /health's fake-bootstrap request; sglang/srt/disaggregation/prefill.py, 0.5.15.post1
  and 0.5.23). Else ``sglang:prompt_tokens_total`` and ``sglang:num_requests_total``: those are no proof of a
  transfer, since SGLang's tokenizer manager counts a request when it finishes, and a request aborted while stuck
  in a wedged prefill's bootstrap queue finishes too (with its prompt tokens).

A request counter is deliberately not used on decode: a canary that arrives there and then waits forever for
its KV would otherwise count as progress in the simulated worker.

The clock of "flat" restarts whenever a counter moves, the worker has no work (it starts again at the first
round that sees work), or the counter goes backwards
(the unit restarted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

TRANSFERS_DONE = "sglang:kv_transfer_latency_ms_count"
PROGRESS_COUNTERS: dict[str, tuple[str, ...]] = {
    "prefill": ("sglang:prompt_tokens_total", "sglang:num_requests_total"),
    "decode": ("sglang:generation_tokens_total",),
    "mono": ("sglang:generation_tokens_total",),
}


def progress_counters(role: str, counters: Mapping[str, float] | None = None) -> tuple[str, ...]:
    """The counters whose movement is a worker's progress; for a prefill that exports TRANSFERS_DONE (as read in
    ``counters``), that count alone."""
    if role == "prefill" and counters is not None and TRANSFERS_DONE in counters:
        return (TRANSFERS_DONE,)
    return PROGRESS_COUNTERS.get(role, PROGRESS_COUNTERS["mono"])


@dataclass
class StallVerdict:
    stalled: bool
    work: float
    flat_s: float
    missing: list[str] = field(default_factory=list)

    def describe(self, name: str) -> str:
        return f"{name}: work {self.work:g} while progress counters flat for {self.flat_s:.0f} s"


@dataclass
class StallDetector:
    """One worker's progress over rounds."""

    role: str
    window_s: float
    last: dict[str, float] = field(default_factory=dict)
    progress_at: float | None = None  # when it last moved, first had work, or (re)started
    had_work: bool = False

    def observe(self, work: float, counters: Mapping[str, float], now: float) -> StallVerdict:
        names = progress_counters(self.role, counters)
        values = {n: counters[n] for n in names if n in counters}
        missing = [n for n in names if n not in counters]
        moved = any(values.get(n, 0.0) != self.last.get(n) for n in values) if self.last else True
        went_back = any(values[n] < self.last.get(n, 0.0) for n in values)
        if self.progress_at is None or moved or went_back or work <= 0 or not self.had_work or missing:
            self.progress_at = now  # work first seen now: it may have arrived just before, never count earlier
        self.last = values
        self.had_work = work > 0
        flat = now - self.progress_at
        return StallVerdict(work > 0 and not missing and flat > self.window_s, work, flat, missing)
