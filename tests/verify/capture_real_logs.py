"""Capture what SGLang's real NIXL prefill code logs on the abort path (run by the runtime python).

    python capture_real_logs.py VERSION CONN_FILE OUT_FILE [LEVEL]

Runs the real ``bootstrap_thread`` and ``transfer_worker`` of ``CONN_FILE`` (pristine or patched) on CPU
through :mod:`pdfleet.patch.nixlcpu`, with the log format of our workers (``[time] message``, DEBUG for the conn
module, or ``LEVEL``: ``info`` is the production level) and Python's own report of a dying thread, and writes
everything they print to ``OUT_FILE``:

1. a decode registers and bootstraps rooms 7 and 8; the decode sends ``ABORT`` for room 8, then for room 99
   (unknown to the prefill), then transfer info for room 10 (once it is registered, ABORT 99 was read);
2. the prefill scheduler's warning for room 8, formatted as ``disaggregation/prefill.py`` does
   (``Prefill transfer failed for request rank=… with exception <KVTransferError>``), with the real
   ``KVTransferError`` built from the failure reason the real handler recorded (nothing when none was);
3. a chunk for room 9, which has no transfer info (the incident's second symptom in ``transfer_worker``), then
   room 7's chunk on the same worker queue (once room 7 is Success, room 9's chunk was handled);
4. an unknown leading frame (``[b"SOMETHING_ELSE", b"1"]``);
5. a wait for the patched code's rate-limited count of handled ABORTs (its timer writes the pending count).

The samples the signature tests classify come from here, never from hand-written text. Two lines are composed
by this script, not printed by SGLang: the scheduler's warning of step 2 (``prefill.py``'s format, around the real
``KVTransferError``; the scheduler is not run here) and the final ``# bootstrap_thread alive`` note. So besides
``OUT_FILE`` it writes ``OUT_FILE.conn``, only the records the conn module's own logger emitted, and
``OUT_FILE.reason``, the failure reason the real ABORT handler recorded for room 8 (empty when none was).
Nothing waits on a clock: every step waits for the state (or the line) the previous one must have produced.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
from pathlib import Path

from pdfleet.patch import nixlcpu

FORMAT = "[%(asctime)s] %(message)s"  # pdfleet_sim.worker's format; SGLang's own adds a rank prefix


def main(version: str, conn_file: str, out_file: str, level: str = "debug") -> int:
    fmt = logging.Formatter(FORMAT, "%Y-%m-%d %H:%M:%S")
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(fmt)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    conn = nixlcpu.load_conn_module(Path(conn_file))
    conn_logger = logging.getLogger(conn.__name__)
    conn_logger.setLevel(getattr(logging, level.upper()))
    # Only what the conn module itself logged (its handler, its count line), apart from every line this script
    # composes: the signature tests match the abort evidence against these lines.
    own = io.StringIO()
    own_handler = logging.StreamHandler(own)
    own_handler.setFormatter(fmt)
    conn_logger.addHandler(own_handler)
    sys.stderr = buf  # threading.excepthook prints "Exception in thread …" and the traceback to stderr
    reason = None

    with nixlcpu.CpuPrefill.start(conn) as prefill, nixlcpu.DecodePusher(prefill.endpoint) as decode:
        decode.send(nixlcpu.register_kv_args_frames(version))
        for room in (7, 8):
            prefill.open_room(room)
            decode.send(nixlcpu.transfer_info_frames(version, room))
            prefill.wait_for_status(room, "WaitingForInput", timeout=5.0)
        decode.send(nixlcpu.abort_frames(version, 8))
        prefill.wait_for(lambda: prefill.status_name(8) == "Failed" or not prefill.bootstrap_alive(), timeout=5.0)
        with prefill.manager.failure_lock:
            reason = prefill.manager.failure_records.pop(8, None)
        if reason is not None:  # what the scheduler logs when it polls the Failed sender
            from sglang.srt.disaggregation.common.conn import KVTransferError

            error = KVTransferError(8, reason)
            logging.getLogger("sglang.srt.disaggregation.prefill").warning(
                f"Prefill transfer failed for request rank=0 req.rid='capture-8' req.bootstrap_room=8 "
                f"with exception {error}")
        decode.send(nixlcpu.abort_frames(version, 99))  # a room the prefill never had: the "ignoring" branch
        # The thread reads its socket in order: once room 10's transfer info is registered, ABORT 99 was handled.
        prefill.open_room(10)
        decode.send(nixlcpu.transfer_info_frames(version, 10))
        prefill.wait_for(lambda: prefill.status_name(10) == "WaitingForInput" or not prefill.bootstrap_alive())
        prefill.open_room(9)
        prefill.enqueue_chunk(9, last=True)
        # One transfer worker takes its queue in order: once room 7's chunk is done, room 9's was handled.
        prefill.enqueue_chunk(7, last=True)
        if not prefill.wait_for_status(7, "Success", timeout=10.0):
            raise SystemExit(f"room 7's chunk was not completed (state {prefill.status_name(7)}): the transfer "
                             "worker is stuck; nothing captured")
        decode.send([b"SOMETHING_ELSE", b"1"])
        prefill.wait_for(lambda: not prefill.bootstrap_alive(), timeout=1.0)
        alive = prefill.bootstrap_alive()
        abort_log = getattr(conn, "_PdfleetAbortLog", None)  # the patch's; pristine code has none
        if abort_log is not None and alive:  # its timer writes the count of the last interval
            prefill.wait_for(lambda: "(total 2)" in own.getvalue(), timeout=abort_log.INTERVAL_S + 10)
    handler.flush()
    own_handler.flush()
    sys.stderr = sys.__stderr__
    text = buf.getvalue() + f"# bootstrap_thread alive at the end: {alive}\n"
    Path(out_file).write_text(text)
    Path(out_file + ".conn").write_text(own.getvalue())
    # the failure reason the real handler recorded for room 8, as SGLang's KVTransferError renders it
    Path(out_file + ".reason").write_text("" if reason is None else f"{reason}\n")
    return 0


if __name__ == "__main__":
    threading.excepthook = threading.__excepthook__  # Python's default report, as in production
    sys.exit(main(*sys.argv[1:5]))
