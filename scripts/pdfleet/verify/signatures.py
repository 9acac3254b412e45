"""What the logs check looks for, and how one log text is classified.

Every pattern names the line of the real SGLang code (or of our patch) that prints it, per pinned version;
the tests feed the classifier lines captured from that code running (``tests/verify/test_signatures_real.py``
runs the real ``bootstrap_thread`` and ``transfer_worker`` of each version on CPU).

Categories (each line counts once, in the first category that matches, in this order):

``thread_death`` (must be 0)
    the incident's assert (``First message should be``, ``Foreign traffic``), Python's report of a thread
    that died (``Exception in thread``), SGLang 0.5.21+'s ``bootstrap_thread died``, and any ``Traceback``
    that is neither the traceback of a line already counted as a failure nor a known benign shape of the
    abort path (:data:`BENIGN_TRACEBACKS`: header line *and* exception type/message). Such a traceback is
    quoted (its header and its exception line): the protocol cannot tell which thread it killed.
``transfer_error`` (must be 0)
    ``Unexpected transfer worker error`` and the ``room in self.transfer_infos`` assertion.
``dropped_frame`` (must be 0 unless ``--allow-dropped-frames``)
    the patched code's *warnings*: ``unexpected leading frame`` (a frame that is neither GUARD nor ABORT,
    skipped), ``Malformed ABORT message skipped`` and ``bootstrap_thread dropped a message``. The thread
    survives these by design, so they are not thread deaths; but during the protocol the only peer of the
    prefill's socket is our own decode, which sends GUARD and ABORT frames only. A skipped frame there
    means a message of our own cluster was lost or that prefill and decode speak different frame
    versions: a defect the patch masks, not noise.
``abort`` (information only)
    client-side aborts: ``Client disconnected``, ``Aborted by AbortReq``, the scheduler's ``Abort … queue
    request.``. They prove sessions were killed, not that an ``ABORT`` reached the prefill.

Abort *evidence* is only what the prefill prints after its bootstrap thread received and handled a decode's
``ABORT`` message, counted per worker log in :attr:`LogScan.aborts_handled`:

* at the production log level (``info``), our patch's count line (:data:`ABORT_COUNTED`, both pins):
  ``pdfleet: bootstrap_thread handled N decode ABORT message(s) on engine_rank=R since its previous line
  (total T)``. It is rate-limited (at most one line per :data:`ABORT_LOG_INTERVAL_S` per rank; a timer writes
  the count of the last interval), so a cascade of thousands of aborts cannot flood the journal and still
  every handled ABORT is counted: the evidence of a log is the sum of N per rank, and of a worker the
  largest rank's sum (every prefill rank of a room gets that room's ABORT);
* at ``debug`` also the per-room lines (:data:`ABORT_HANDLED`, counted per distinct room): the failure reason
  the handler records (``Aborted by decode-side abort notification.``, shown by the prefill scheduler's
  ``Prefill transfer|bootstrap failed … with exception KVTransferError(…)`` warning, which appears only when
  the decode's ABORT beats the prefill's own abort of the same request) and the handler's own
  ``Received abort notification for room N, marked as Failed|ignoring …`` (debug level).

A worker's evidence is the larger of the two counts (they count the same ABORTs). Generic failure counters and
lines (``num_bootstrap_failed_reqs``, ``Prefill … failed`` with any other reason) also rise on the prefill's own
aborts and on timeouts, so they prove nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Signature:
    """A log line pattern and where the real code prints it (file:line per version)."""

    pattern: re.Pattern[str]
    printed_by: str


def _sig(pattern: str, printed_by: str) -> Signature:
    return Signature(re.compile(pattern), printed_by)


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

# The prefill handled a decode's ABORT message, per pinned SGLang version (patched where the version
# needs our patch to handle it at all; pristine 0.5.15.post1 has no ABORT branch: its thread dies).
_HANDLED_REASON = r"Aborted by decode-side abort notification"
# Both branches of the handler: the room was marked Failed, or it had already concluded ("ignoring"). Either
# way the prefill's bootstrap thread received the ABORT and survived it (pristine 0.5.15.post1 dies instead).
_HANDLED_DEBUG = r"Received abort notification for room (?P<room>\d+), (?:marked as Failed|ignoring)"
ABORT_HANDLED: dict[str, tuple[Signature, ...]] = {
    "0.5.15.post1": (
        _sig(_HANDLED_REASON,
             "our patch (scripts/pdfleet/patches/0.5.15.post1/nixl-conn.patch, "
             "_handle_abort_notification: record_failure), printed by sglang/srt/disaggregation/prefill.py:778-789 "
             "(transfer) and :862-876 (bootstrap) via KVTransferError.__str__ (common/conn.py:64-65)"),
        _sig(_HANDLED_DEBUG, "our patch, _handle_abort_notification logger.debug (both branches)"),
    ),
    "0.5.23": (
        _sig(_HANDLED_REASON,
             "sglang/srt/disaggregation/nixl/conn.py:3322-3325 (record_failure), printed by "
             "disaggregation/prefill.py:1286-1300 (transfer) and :1354-1368 (bootstrap) via "
             "KVTransferError.__str__ (common/conn.py:115-116)"),
        _sig(_HANDLED_DEBUG, "sglang/srt/disaggregation/nixl/conn.py:3327-3335 (logger.debug, both branches)"),
    ),
}
# Our patch's info-level count of handled ABORTs (both pins: 0.5.15.post1's own handler, 0.5.23's upstream one),
# printed by _PdfleetAbortLog._write in scripts/pdfleet/patches/<version>/nixl-conn.patch.
ABORT_COUNTED = _sig(r"pdfleet: bootstrap_thread handled (?P<count>\d+) decode ABORT message\(s\) on "
                     r"engine_rank=(?P<rank>\S+) since its previous line \(total (?P<total>\d+)\)",
                     "our patch (both pins): _PdfleetAbortLog._write, called from bootstrap_thread after each "
                     "handled ABORT, at most once per interval (a timer writes the rest)")
# The patch's _PdfleetAbortLog.INTERVAL_S (tests/verify/test_signatures_real.py reads it from the patched code):
# the last count line of a cascade is written at most this long after its last ABORT.
ABORT_LOG_INTERVAL_S = 2.0
_ROOM = (re.compile(r"bootstrap_room=(?P<room>\d+)"), re.compile(r"\broom[= ](?P<room>\d+)"))


@dataclass(frozen=True)
class BenignTraceback:
    """A traceback the abort path prints by design: its header line and its final exception line."""

    header: re.Pattern[str]
    exception: re.Pattern[str]
    versions: tuple[str, ...]
    printed_by: str


# SGLang 0.5.23's prefill notifies its KV sender of an abort "best effort" and logs a failure with
# logger.exception (prefill.py:1336-1341, the comment there: "Transport notification is best effort");
# only a ZMQ transport error is the expected shape. Any other exception under that header is quoted.
BENIGN_TRACEBACKS: tuple[BenignTraceback, ...] = (
    BenignTraceback(re.compile(r"Failed to notify KV sender of abort for "),
                    re.compile(r"^(?:zmq\.error\.)?(?:ZMQError|Again|ContextTerminated)\b"),
                    ("0.5.23",), "sglang/srt/disaggregation/prefill.py:1336-1341"),
)

TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\)")
CHAINED = re.compile(r"^(During handling of the above exception|The above exception was the direct cause)")
EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s*(?P<message>.*))?$")
TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})")
# journalctl -o short-iso: "2026-01-01T09:00:00+0000 host unit[pid]: message" (the dumps since the last start)
JOURNAL_PREFIX = re.compile(r"^(?P<time>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\S*) \S+ [^:\s]+: ")
CATEGORIES = (("thread_death", THREAD_DEATH), ("transfer_error", TRANSFER_ERROR),
              ("dropped_frame", DROPPED_FRAME), ("abort", ABORT))
FAILURE_CATEGORIES = ("thread_death", "transfer_error", "dropped_frame")
EXAMPLES_KEPT = 3
# Kept for callers of the previous API: how many lines before a traceback used to explain it.
TRACEBACK_LOOKBACK = 1


@dataclass
class LogScan:
    """Counts per category for one log, with a few example lines of each failure category."""

    lines: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {name: 0 for name, _ in CATEGORIES})
    aborts_handled: int = 0  # distinct rooms whose decode ABORT the prefill handled (the evidence)
    uncaught_tracebacks: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)
    deaths: list[dict[str, str]] = field(default_factory=list)  # each thread death: line and time
    _rooms: set[str] = field(default_factory=set)
    _counted: dict[str, int] = field(default_factory=dict)  # ABORT_COUNTED's N summed per engine rank

    @property
    def transfer_abort(self) -> int:  # the previous name of the evidence count
        return self.aborts_handled

    def add(self, other: LogScan) -> None:
        self.lines += other.lines
        for k, v in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        self.aborts_handled += other.aborts_handled
        self.uncaught_tracebacks += other.uncaught_tracebacks
        self.deaths += other.deaths
        for k, v in other.examples.items():
            self.examples.setdefault(k, []).extend(v[: EXAMPLES_KEPT - len(self.examples.get(k, []))])

    def to_dict(self) -> dict[str, object]:
        return {"lines": self.lines, **self.counts, "aborts_handled": self.aborts_handled,
                "uncaught_tracebacks": self.uncaught_tracebacks, "examples": self.examples,
                "deaths": self.deaths}


def classify(line: str) -> str | None:
    for name, patterns in CATEGORIES:
        if any(p.search(line) for p in patterns):
            return name
    return None


def handled_signatures(version: str | None) -> tuple[Signature, ...]:
    """The abort-evidence signatures of ``version``; every known version's for an unknown one."""
    if version in ABORT_HANDLED:
        return ABORT_HANDLED[version]
    seen: dict[str, Signature] = {}
    for sigs in ABORT_HANDLED.values():
        for sig in sigs:
            seen.setdefault(sig.pattern.pattern, sig)
    return tuple(seen.values())


def _example(scan: LogScan, category: str, line: str) -> None:
    kept = scan.examples.setdefault(category, [])
    if len(kept) < EXAMPLES_KEPT:
        kept.append(line.strip()[:300])


def _room_of(line: str, match: re.Match[str]) -> str | None:
    if match.groupdict().get("room"):
        return match.group("room")
    for pattern in _ROOM:
        m = pattern.search(line)
        if m:
            return m.group("room")
    return None


def _benign(header: str, exception: str, version: str | None) -> bool:
    return any(b.header.search(header) and b.exception.search(exception)
               and (version is None or version not in ABORT_HANDLED or version in b.versions)
               for b in BENIGN_TRACEBACKS)


@dataclass
class _Traceback:
    header: str
    header_category: str | None
    exception: str = ""


def scan_text(text: str, version: str | None = None) -> LogScan:
    """Classify every line of one worker's log; ``version`` picks the abort-evidence signatures."""
    scan = LogScan()
    handled = handled_signatures(version)
    header, header_category, last_time = "", None, ""
    tb: _Traceback | None = None
    for raw in text.splitlines():
        prefix = JOURNAL_PREFIX.match(raw)
        line = raw[prefix.end():] if prefix else raw
        if not line.strip():
            continue
        scan.lines += 1
        stamp = TIMESTAMP.search(raw)
        if stamp:
            last_time = stamp.group(1)
        if TRACEBACK.search(line):
            if tb is None:  # a chained traceback continues the one before it
                tb = _Traceback(header, header_category)
            continue
        if tb is not None:
            if line.startswith((" ", "\t")) or CHAINED.search(line):
                continue
            m = EXCEPTION_LINE.match(line.strip())
            if m and not line.startswith("["):
                tb.exception = line.strip()
                _classify_line(scan, line, handled, last_time)  # e.g. the assert's message
                continue
            _close_traceback(scan, tb, version, last_time)
            tb = None
        header_category = _classify_line(scan, line, handled, last_time)
        header = line
    if tb is not None:
        _close_traceback(scan, tb, version, last_time)
    scan.aborts_handled = max(len(scan._rooms) + scan.aborts_handled, max(scan._counted.values(), default=0))
    return scan


def _classify_line(scan: LogScan, line: str, handled: tuple[Signature, ...], when: str) -> str | None:
    category = classify(line)
    if category is not None:
        scan.counts[category] += 1
        if category != "abort":
            _example(scan, category, line)
        if category == "thread_death":
            scan.deaths.append({"line": line.strip()[:300], "time": when or "unknown"})
    counted = ABORT_COUNTED.pattern.search(line)
    if counted:
        rank = counted.group("rank")
        scan._counted[rank] = scan._counted.get(rank, 0) + int(counted.group("count"))
        return category
    for sig in handled:
        m = sig.pattern.search(line)
        if m:
            room = _room_of(line, m)
            if room is None:
                scan.aborts_handled += 1
            else:
                scan._rooms.add(room)
            break
    return category


def _close_traceback(scan: LogScan, tb: _Traceback, version: str | None, when: str) -> None:
    """A traceback under a counted failure line belongs to it; a benign shape is excused; else a death."""
    if tb.header_category in FAILURE_CATEGORIES:
        return
    if _benign(tb.header, tb.exception, version):
        return
    scan.counts["thread_death"] += 1
    scan.uncaught_tracebacks += 1
    quote = f"uncaught {tb.exception or 'exception'} (after: {tb.header.strip()[:150]!r})"
    _example(scan, "thread_death", quote)
    scan.deaths.append({"line": quote[:300], "time": when or "unknown"})
