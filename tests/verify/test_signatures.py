"""The log classifier: which lines are thread deaths, transfer errors, dropped frames, aborts."""

from __future__ import annotations

from pdfleet.verify.signatures import classify, scan_text

PRISTINE_DEATH = """\
[2026-01-01 10:00:00] Client disconnected: Request is disconnected from the client side. Abort request obj.rid='a'
Exception in thread Thread-1 (bootstrap_thread):
Traceback (most recent call last):
  File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner
    self.run()
  File "sglang/srt/disaggregation/nixl/conn.py", line 2349, in bootstrap_thread
    assert (
AssertionError: First message should be b'NixlMsgGuard'. Foreign traffic?
"""

TRANSFER_ERROR = """\
Unexpected transfer worker error for room 42
Traceback (most recent call last):
  File "conn.py", line 1010, in transfer_worker
    assert room in self.transfer_infos
AssertionError
"""

PATCHED_WARNINGS = """\
bootstrap_thread: unexpected leading frame b'SOMETHING' (expected b'NixlMsgGuard'); message of 2 frames skipped
Malformed ABORT message skipped: [b'ABORT']
prefill bootstrap_thread dropped a message it could not process; still serving
Traceback (most recent call last):
  File "conn.py", line 1, in bootstrap_thread
ValueError: boom
"""

ABORTS = "\n".join([
    "[http_server] Client disconnected: Request is disconnected from the client side. Abort request obj.rid='x'",
    "Decode transfer failed for request rank=0 decode_req.req.rid='x' with exception "
    "KVTransferError(bootstrap_room=1): Aborted by AbortReq.",
    "Decode handshake failed for request rank=0 decode_req.req.rid='y' with exception "
    "KVTransferError(bootstrap_room=2): Aborted by AbortReq.",
    "Prefill transfer failed for request rank=0 req.rid='z' with exception "
    "KVTransferError(bootstrap_room=3): Aborted by decode-side abort notification.",
    "Abort prealloc queue request. decode_req.req.rid='q'",
    "Abort running request. req.rid='r'",
])


def test_pristine_thread_death_counts_and_explained_traceback() -> None:
    scan = scan_text(PRISTINE_DEATH)
    # "Exception in thread" and the assertion line; the traceback is explained by the line before it
    assert scan.counts["thread_death"] == 2
    assert scan.uncaught_tracebacks == 0
    assert scan.counts["abort"] == 1
    assert scan.examples["thread_death"][0].startswith("Exception in thread")


def test_transfer_worker_error() -> None:
    scan = scan_text(TRANSFER_ERROR)
    assert scan.counts["transfer_error"] == 2  # the error line and the transfer_infos assert
    assert scan.counts["thread_death"] == 0 and scan.uncaught_tracebacks == 0


def test_patched_warnings_are_dropped_frames_not_deaths() -> None:
    scan = scan_text(PATCHED_WARNINGS)
    assert scan.counts["dropped_frame"] == 3
    assert scan.counts["thread_death"] == 0, "the logged-and-survived exception is explained by its message"


def test_uncaught_traceback_is_a_thread_death() -> None:
    scan = scan_text("some info line\nTraceback (most recent call last):\n  File 'x'\nKeyError: 1\n")
    assert scan.counts["thread_death"] == 1 and scan.uncaught_tracebacks == 1


def test_abort_events_and_transfer_aborts() -> None:
    scan = scan_text(ABORTS)
    assert scan.counts["abort"] == 6
    assert scan.transfer_abort == 4  # decode transfer + handshake, prefill notification, prealloc queue


def test_clean_log() -> None:
    scan = scan_text("The server is fired up and ready to roll!\n\nINFO GET /health 200\n")
    assert scan.lines == 2
    assert all(v == 0 for v in scan.counts.values())


def test_priority_death_over_abort() -> None:
    assert classify("bootstrap_thread died on engine_rank=0 after Aborted by AbortReq") == "thread_death"
    assert classify("nothing here") is None
