"""Capture what SGLang's real NIXL prefill code logs on the abort path (run by the runtime python).

    python capture_real_logs.py VERSION CONN_FILE OUT_FILE [LEVEL]

Runs the real ``bootstrap_thread`` and ``transfer_worker`` of ``CONN_FILE`` (pristine or patched) on CPU
through :mod:`pdfleet.patch.nixlcpu`, with the log format of our workers (``[time] message``, DEBUG for the conn
module, or ``LEVEL``: ``info`` is the production level) and Python's own report of a dying thread, and writes
everything they print to ``OUT_FILE``:

1. a decode registers and bootstraps rooms 7 and 8; the decode sends ``ABORT`` for room 8, then for room 99
   (unknown to the prefill);
2. the prefill scheduler's warning for room 8, formatted as ``disaggregation/prefill.py`` does
   (``Prefill transfer failed for request rank=… with exception <KVTransferError>``), with the real
   ``KVTransferError`` built from the failure reason the real handler recorded (nothing when none was);
3. a chunk for room 9, which has no transfer info (the incident's second symptom in ``transfer_worker``);
4. an unknown leading frame (``[b"SOMETHING_ELSE", b"1"]``);
5. a wait for the patched code's rate-limited count of handled ABORTs (its timer writes the pending count).

The samples the signature tests classify come from here, never from hand-written text.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
import time
from pathlib import Path

from pdfleet.patch import nixlcpu

FORMAT = "[%(asctime)s] %(message)s"  # pdfleet.simworker's format; SGLang's own adds a rank prefix


def main(version: str, conn_file: str, out_file: str, level: str = "debug") -> int:
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter(FORMAT, "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    conn = nixlcpu.load_conn_module(Path(conn_file))
    logging.getLogger(conn.__name__).setLevel(getattr(logging, level.upper()))
    sys.stderr = buf  # threading.excepthook prints "Exception in thread …" and the traceback to stderr

    with nixlcpu.CpuPrefill.start(conn) as prefill, nixlcpu.DecodePusher(prefill.endpoint) as decode:
        decode.send(nixlcpu.register_kv_args_frames(version))
        for room in (7, 8):
            prefill.open_room(room)
            decode.send(nixlcpu.transfer_info_frames(version, room))
            prefill.wait_for_status(room, "WaitingForInput", timeout=5.0)
        decode.send(nixlcpu.abort_frames(version, 8))
        prefill.wait_for_status(8, "Failed", timeout=3.0)
        with prefill.manager.failure_lock:
            reason = prefill.manager.failure_records.pop(8, None)
        if reason is not None:  # what the scheduler logs when it polls the Failed sender
            from sglang.srt.disaggregation.common.conn import KVTransferError

            error = KVTransferError(8, reason)
            logging.getLogger("sglang.srt.disaggregation.prefill").warning(
                f"Prefill transfer failed for request rank=0 req.rid='capture-8' req.bootstrap_room=8 "
                f"with exception {error}")
        decode.send(nixlcpu.abort_frames(version, 99))  # a room the prefill never had: the "ignoring" branch
        time.sleep(0.3)
        prefill.open_room(9)
        prefill.enqueue_chunk(9, last=True)
        time.sleep(0.5)
        decode.send([b"SOMETHING_ELSE", b"1"])
        prefill.wait_for(lambda: not prefill.bootstrap_alive(), timeout=1.0)
        alive = prefill.bootstrap_alive()
        abort_log = getattr(conn, "_PdfleetAbortLog", None)  # the patch's; pristine code has none
        if abort_log is not None:
            time.sleep(abort_log.INTERVAL_S + 0.3)
    handler.flush()
    sys.stderr = sys.__stderr__
    text = buf.getvalue() + f"# bootstrap_thread alive at the end: {alive}\n"
    Path(out_file).write_text(text)
    return 0


if __name__ == "__main__":
    threading.excepthook = threading.__excepthook__  # Python's default report, as in production
    sys.exit(main(*sys.argv[1:5]))
