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
    # "Exception in thread" and the assertion's message; the traceback belongs to the line before it
    assert scan.counts["thread_death"] == 2
    assert scan.uncaught_tracebacks == 0
    assert scan.counts["abort"] == 1
    assert scan.examples["thread_death"][0].startswith("Exception in thread")
    assert scan.deaths[0]["time"] == "2026-01-01 10:00:00"  # the last time the log printed before it


def test_transfer_worker_error() -> None:
    scan = scan_text(TRANSFER_ERROR)
    assert scan.counts["transfer_error"] == 1  # the error line; its traceback belongs to it
    assert scan.counts["thread_death"] == 0 and scan.uncaught_tracebacks == 0


def test_patched_warnings_are_dropped_frames_not_deaths() -> None:
    scan = scan_text(PATCHED_WARNINGS)
    assert scan.counts["dropped_frame"] == 3
    assert scan.counts["thread_death"] == 0, "the logged-and-survived exception belongs to its message"


def test_uncaught_traceback_is_a_thread_death() -> None:
    scan = scan_text("some info line\nTraceback (most recent call last):\n  File 'x'\nKeyError: 1\n")
    assert scan.counts["thread_death"] == 1 and scan.uncaught_tracebacks == 1
    assert "KeyError: 1" in scan.examples["thread_death"][0]


def test_a_traceback_right_after_an_abort_line_is_not_excused() -> None:
    """Issue 11 item 2: proximity to an abort line excuses nothing; the exception is quoted."""
    text = ("[2026-01-01 10:00:01] Decode transfer failed for request rank=0 decode_req.req.rid='x' with exception "
            "KVTransferError(bootstrap_room=1): Aborted by AbortReq.\n"
            "Traceback (most recent call last):\n  File \"scheduler.py\", line 1, in event_loop\n"
            "RuntimeError: scheduler lost its batch\n")
    scan = scan_text(text)
    assert scan.counts["thread_death"] == 1 and scan.uncaught_tracebacks == 1
    assert "RuntimeError: scheduler lost its batch" in scan.examples["thread_death"][0]
    assert scan.deaths[0]["time"] == "2026-01-01 10:00:01"


def test_benign_shape_needs_its_header_and_its_exception() -> None:
    header = "[2026-01-01 10:00:01] Failed to notify KV sender of abort for rid-1\n"
    tb = "Traceback (most recent call last):\n  File \"prefill.py\", line 1338, in release\n"
    benign = scan_text(header + tb + "zmq.error.Again: Resource temporarily unavailable\n", "0.5.23")
    assert benign.counts["thread_death"] == 0
    other = scan_text(header + tb + "RuntimeError: boom\n", "0.5.23")
    assert other.counts["thread_death"] == 1 and "RuntimeError: boom" in other.examples["thread_death"][0]
    # the shape belongs to 0.5.23's code; 0.5.15.post1 prints no such line
    assert scan_text(header + tb + "zmq.error.Again: x\n", "0.5.15.post1").counts["thread_death"] == 1


def test_chained_traceback_is_one_event() -> None:
    text = ("info\nTraceback (most recent call last):\n  File 'a'\nKeyError: 1\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            "Traceback (most recent call last):\n  File 'b'\nValueError: 2\n[2026-01-01 10:00:02] next line\n")
    scan = scan_text(text)
    assert scan.uncaught_tracebacks == 1 and "ValueError: 2" in scan.examples["thread_death"][0]


def test_client_aborts_are_not_abort_evidence() -> None:
    """Client disconnects and decode-side AbortReq failures prove sessions died, not that ABORT reached the prefill."""
    scan = scan_text(ABORTS)
    assert scan.counts["abort"] == 6
    assert scan.aborts_handled == 1  # only the prefill's "decode-side abort notification" (room 3)


def test_evidence_counts_rooms_once() -> None:
    text = ("Received abort notification for room 3, marked as Failed\n"
            "Prefill transfer failed for request rank=0 req.rid='z' req.bootstrap_room=3 with exception "
            "KVTransferError(bootstrap_room=3): Aborted by decode-side abort notification.\n"
            "Received abort notification for room 4, ignoring (already completed or unknown)\n"
            "Received abort notification for room 4, ignoring (already completed or unknown)\n")
    # room 3 printed twice counts once; room 4's ABORT reached a concluded room: still received and handled
    assert scan_text(text, "0.5.23").aborts_handled == 2


def test_clean_log() -> None:
    scan = scan_text("The server is fired up and ready to roll!\n\nINFO GET /health 200\n")
    assert scan.lines == 2
    assert all(v == 0 for v in scan.counts.values())


def test_priority_death_over_abort() -> None:
    assert classify("bootstrap_thread died on engine_rank=0 after Aborted by AbortReq") == "thread_death"
    assert classify("nothing here") is None


def test_journal_short_iso_lines_are_scanned_like_plain_ones() -> None:
    """The dumps since each unit's last start carry journalctl's prefix; tracebacks must still be seen."""
    text = ("2026-01-01T09:00:01+0000 node1 python[42]: [2026-01-01 09:00:01] Client disconnected\n"
            "2026-01-01T09:00:02+0000 node1 python[42]: Traceback (most recent call last):\n"
            "2026-01-01T09:00:02+0000 node1 python[42]:   File \"x.py\", line 1, in f\n"
            "2026-01-01T09:00:02+0000 node1 python[42]: KeyError: 'room'\n")
    scan = scan_text(text)
    assert scan.uncaught_tracebacks == 1 and "KeyError: 'room'" in scan.examples["thread_death"][0]
    assert scan.deaths[0]["time"] == "2026-01-01T09:00:02"
