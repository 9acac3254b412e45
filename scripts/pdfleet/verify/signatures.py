"""What the logs check looks for, and how one log text is classified.

Categories (each line counts once, in the first category that matches, in this order):

``thread_death`` (must be 0)
    the incident's assert (``First message should be``, ``Foreign traffic``), Python's report of a thread
    that died (``Exception in thread``), SGLang 0.5.21+'s ``bootstrap_thread died``, and any
    ``Traceback`` that no other signature on the lines just before it explains (an uncaught exception:
    the protocol cannot tell which thread it killed, so it assumes the worst).
``transfer_error`` (must be 0)
    ``Unexpected transfer worker error`` and the ``room in self.transfer_infos`` assertion.
``dropped_frame`` (must be 0 unless ``--allow-dropped-frames``)
    the patched code's *warnings*: ``unexpected leading frame`` (a frame that is neither GUARD nor ABORT,
    skipped), ``Malformed ABORT message skipped`` and ``bootstrap_thread dropped a message``. The thread
    survives these by design, so they are not thread deaths; but during the protocol the only peer of the
    prefill's socket is our own decode, which sends GUARD and ABORT frames only. A skipped frame there
    means a message of our own cluster was lost (a room can leak until the waiting timeout) or that
    prefill and decode speak different frame versions: a defect the patch masks, not noise. So it fails
    the check by default, reported under its own name so nobody mistakes it for the wedge.
``abort`` (must be >= ``--min-abort-events``)
    ``Aborted by AbortReq``, ``Client disconnected``, ``Aborted by decode-side abort notification``,
    and SGLang's debug-level ``Abort … request.`` lines.

``transfer_abort`` is a sub-count of ``abort``: aborts that hit a request whose KV handshake or transfer
was still pending (``Decode transfer|handshake failed … Aborted by AbortReq``, the prefill's
``decode-side abort notification``, ``Abort prealloc|transfer|bootstrap|inflight queue request``) — the
path that pushes ``ABORT`` to the prefill, the one the incident is about.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

THREAD_DEATH = (
    re.compile(r"First message should be"),
    re.compile(r"Foreign traffic"),
    re.compile(r"Exception in thread"),
    re.compile(r"bootstrap_thread died"),
)
TRANSFER_ERROR = (
    re.compile(r"Unexpected transfer worker error"),
    re.compile(r"transfer_infos"),
)
DROPPED_FRAME = (
    re.compile(r"unexpected leading frame"),
    re.compile(r"Malformed ABORT message skipped"),
    re.compile(r"bootstrap_thread dropped a message"),
)
ABORT = (
    re.compile(r"Aborted by AbortReq"),
    re.compile(r"Client disconnected"),
    re.compile(r"Aborted by decode-side abort notification"),
    re.compile(r"Abort \w+ (?:queue )?request\."),
)
TRANSFER_ABORT = (
    re.compile(r"Decode (?:transfer|handshake) failed .*Aborted by AbortReq"),
    re.compile(r"Aborted by decode-side abort notification"),
    re.compile(r"Abort (?:prealloc|transfer|bootstrap|inflight) queue request"),
)
TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\)")
# How many preceding lines may explain a traceback (the logger.exception line, "Exception in thread").
TRACEBACK_LOOKBACK = 3
CATEGORIES = (("thread_death", THREAD_DEATH), ("transfer_error", TRANSFER_ERROR),
              ("dropped_frame", DROPPED_FRAME), ("abort", ABORT))
EXAMPLES_KEPT = 3


@dataclass
class LogScan:
    """Counts per category for one log, with a few example lines of each failure category."""

    lines: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {name: 0 for name, _ in CATEGORIES})
    transfer_abort: int = 0
    uncaught_tracebacks: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, other: LogScan) -> None:
        self.lines += other.lines
        for k, v in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        self.transfer_abort += other.transfer_abort
        self.uncaught_tracebacks += other.uncaught_tracebacks
        for k, v in other.examples.items():
            self.examples.setdefault(k, []).extend(v[: EXAMPLES_KEPT - len(self.examples.get(k, []))])

    def to_dict(self) -> dict[str, object]:
        return {"lines": self.lines, **self.counts, "transfer_abort": self.transfer_abort,
                "uncaught_tracebacks": self.uncaught_tracebacks, "examples": self.examples}


def classify(line: str) -> str | None:
    for name, patterns in CATEGORIES:
        if any(p.search(line) for p in patterns):
            return name
    return None


def _example(scan: LogScan, category: str, line: str) -> None:
    kept = scan.examples.setdefault(category, [])
    if len(kept) < EXAMPLES_KEPT:
        kept.append(line.strip()[:300])


def scan_text(text: str) -> LogScan:
    scan = LogScan()
    recent: list[str | None] = []  # categories of the last few non-empty lines
    for line in text.splitlines():
        if not line.strip():
            continue
        scan.lines += 1
        if TRACEBACK.search(line):
            if not any(recent[-TRACEBACK_LOOKBACK:]):
                scan.counts["thread_death"] += 1
                scan.uncaught_tracebacks += 1
                _example(scan, "thread_death", line)
            recent.append(None)
            continue
        category = classify(line)
        if category is not None:
            scan.counts[category] += 1
            if category == "abort" and any(p.search(line) for p in TRANSFER_ABORT):
                scan.transfer_abort += 1
            if category != "abort":
                _example(scan, category, line)
        recent.append(category)
        del recent[:-TRACEBACK_LOOKBACK]
    return scan
