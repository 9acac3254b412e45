"""Prometheus text exposition under SGLang's metric names and labels.

SGLang exports scheduler metrics with the labels ``model_name, engine_type, tp_rank, pp_rank,
moe_ep_rank`` and tokenizer metrics with ``model_name, engine_type``; ``engine_type`` is
``prefill``, ``decode`` or ``unified``. The simulator keeps one scheduler (rank 0) and renders the
same families, so dashboards and the verification protocol read a simulated worker like a real one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

# (name, help) pairs. Gauges and the first counters carry the scheduler labels, the others the
# tokenizer labels, as in SGLang.
GAUGES: tuple[tuple[str, str], ...] = (
    ("sglang:num_running_reqs", "The number of running requests."),
    ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
    ("sglang:num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue."),
    ("sglang:num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."),
    ("sglang:num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."),
    ("sglang:num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."),
    ("sglang:gen_throughput", "The generation throughput (token/s)."),
    ("sglang:token_usage", "The token usage."),
)
SCHEDULER_COUNTERS: tuple[tuple[str, str], ...] = (
    ("sglang:num_bootstrap_failed_reqs_total", "The number of bootstrap failed requests."),
    ("sglang:num_transfer_failed_reqs_total", "The number of transfer failed requests."),
)
TOKENIZER_COUNTERS: tuple[tuple[str, str], ...] = (
    ("sglang:prompt_tokens_total", "Number of prefill tokens processed."),
    ("sglang:generation_tokens_total", "Number of generation tokens processed."),
    ("sglang:num_requests_total", "Number of requests processed."),
    ("sglang:num_aborted_requests_total", "Number of requests aborted."),
)
# SGLang's prefill observes this histogram once per KV transfer that succeeded (not for an aborted request nor a
# /health fake-bootstrap one); the watchdog reads its _count as the prefill's progress (pdfleet.watchdog.progress).
TRANSFER_HISTOGRAM = ("sglang:kv_transfer_latency_ms", "The KV transfer latency (ms).")
TRANSFER_BUCKETS_MS: tuple[float, ...] = (1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0)
# Not SGLang's: simulator-only facts the verification protocol may want (thread liveness).
SIM_GAUGES: tuple[tuple[str, str], ...] = (
    ("pdfleet_sim:kv_thread_alive", "1 if the named KV manager thread of the simulated worker is alive."),
)


def engine_type(disaggregation_mode: str) -> str:
    return {"prefill": "prefill", "decode": "decode"}.get(disaggregation_mode, "unified")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _fmt(value: float) -> str:
    if value == int(value):
        return f"{int(value)}.0"
    return repr(float(value))


@dataclass
class Metrics:
    """Counters owned by the worker; gauges are sampled from live state when rendering."""

    model_name: str
    disaggregation_mode: str
    counters: dict[str, float] = field(default_factory=dict)
    # the prefill's KV transfer latency histogram: a count per bucket (TRANSFER_BUCKETS_MS, then +Inf), the sum
    transfer_buckets: list[int] = field(default_factory=lambda: [0] * (len(TRANSFER_BUCKETS_MS) + 1))
    transfer_sum_ms: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        for name, _ in (*SCHEDULER_COUNTERS, *TOKENIZER_COUNTERS):
            self.counters.setdefault(name, 0.0)

    def inc(self, name: str, amount: float = 1.0) -> None:
        if name not in self.counters:
            raise KeyError(f"unknown counter {name}")
        with self._lock:
            self.counters[name] += amount

    def value(self, name: str) -> float:
        return self.counters[name]

    def observe_transfer(self, latency_ms: float) -> None:
        """One KV transfer the prefill completed (SGLang's kv_transfer_latency_ms histogram)."""
        with self._lock:
            self.transfer_buckets[next((i for i, le in enumerate(TRANSFER_BUCKETS_MS) if latency_ms <= le),
                                       len(TRANSFER_BUCKETS_MS))] += 1
            self.transfer_sum_ms += latency_ms

    def _transfer_lines(self, labels: dict[str, str]) -> list[str]:
        name, help_text = TRANSFER_HISTOGRAM
        with self._lock:
            buckets, total = list(self.transfer_buckets), self.transfer_sum_ms
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        if not sum(buckets):
            # as SGLang's labelled histogram (prometheus-client): no sample before the first observation, so a
            # fresh prefill has no count and the watchdog falls back to its request counters until one transfer
            return lines
        cumulative = 0
        for le, n in zip([*map(str, TRANSFER_BUCKETS_MS), "+Inf"], buckets, strict=True):
            cumulative += n
            lines.append(f"{name}_bucket{_labels({**labels, 'le': le})} {_fmt(cumulative)}")
        lines += [f"{name}_sum{_labels(labels)} {_fmt(total)}", f"{name}_count{_labels(labels)} {_fmt(cumulative)}"]
        return lines

    @property
    def tokenizer_labels(self) -> dict[str, str]:
        return {"model_name": self.model_name, "engine_type": engine_type(self.disaggregation_mode)}

    @property
    def scheduler_labels(self) -> dict[str, str]:
        return {**self.tokenizer_labels, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}

    def render(self, gauges: dict[str, float], threads: Iterable[tuple[str, bool]] = (),
               http_active: dict[tuple[str, str], int] | None = None) -> str:
        """The ``/metrics`` body (Prometheus text format 0.0.4). ``http_active``: (endpoint, method) ->
        requests in progress, rendered as SGLang's ``sglang:http_requests_active{endpoint,method}``."""
        lines: list[str] = []
        sched = _labels(self.scheduler_labels)
        tok = _labels(self.tokenizer_labels)
        for name, help_text in GAUGES:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
                      f"{name}{sched} {_fmt(gauges.get(name, 0.0))}"]
        for family, labels in ((SCHEDULER_COUNTERS, sched), (TOKENIZER_COUNTERS, tok)):
            for name, help_text in family:
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter",
                          f"{name}{labels} {_fmt(self.counters[name])}"]
        if self.disaggregation_mode == "prefill":
            lines += self._transfer_lines(self.scheduler_labels)
        if http_active is not None:
            name = "sglang:http_requests_active"
            lines += [f"# HELP {name} Number of currently active HTTP requests", f"# TYPE {name} gauge"]
            for (endpoint, method), count in sorted(http_active.items()):
                lines.append(f"{name}{_labels({'endpoint': endpoint, 'method': method})} {_fmt(count)}")
        threads = list(threads)
        if threads:
            name, help_text = SIM_GAUGES[0]
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            for thread, alive in threads:
                labels = _labels({**self.tokenizer_labels, "thread": thread})
                lines.append(f"{name}{labels} {_fmt(1.0 if alive else 0.0)}")
        return "\n".join(lines) + "\n"

