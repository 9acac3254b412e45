"""Reproduce the NIXL bootstrap-thread wedge on SGLang's real code, pristine and patched.

Each case drives a real prefill ``NixlKVManager`` (``pdfleet.patch.nixlcpu.CpuPrefill``) with decode-style
frames on loopback ZMQ, then sends a *probe*: a valid transfer info for a new room, followed by its
(dummy) KV chunk. A healthy thread registers the probe (``WaitingForInput``) and the transfer worker
completes it (``Success``); a dead thread never does: that is the wedge.

Cases (the same for every version):

* ``abort-cascade``: 100 live rooms (half with transfer info, as with pending transfers) and a burst of
  200 decode ABORTs (the 100 live rooms + 100 unknown ones), then KV chunks for the aborted rooms,
  then the probe.
* ``foreign-frame``: one message whose leading frame is neither GUARD nor a known tag, then the probe.
* ``malformed-frames``: truncated and garbled messages (GUARD alone, short ABORTs, non-ASCII rooms …),
  then the probe.

:data:`EXPECTED_ALIVE` says, per version, whether the pristine thread survives each case (the patched
one always must). The cases run inside the heavy runtime (``pdfleet.patch.runtime``) as
``python -m pdfleet.patch.wedge --version V --conn-file F --out JSON``; :func:`run_cases` does that from the
light interpreter and :func:`evaluate` judges a result.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pdfleet.errors import PdfleetError

CASES = ("abort-cascade", "foreign-frame", "malformed-frames")
FOREIGN_FRAMES: list[bytes] = [b"SOMETHING_ELSE", b"1"]
LIVE_ROOMS = range(1, 101)
UNKNOWN_ROOMS = range(10_001, 10_101)
CHUNKED_ROOMS = range(1, 101, 2)  # the live rooms that got transfer info (were WaitingForInput)
CLEARED_ROOMS = range(1, 51)
PROBE_ROOM = 9_999
DEATH_SIGNATURES = ("First message should be", "Foreign traffic", "bootstrap_thread died")
WORKER_ERROR = "Unexpected transfer worker error"

# Whether the PRISTINE bootstrap thread survives each case (the patched one must always survive).
EXPECTED_ALIVE: dict[str, dict[str, bool]] = {
    "0.5.15.post1": {"abort-cascade": False, "foreign-frame": False, "malformed-frames": False},
    "0.5.23": {"abort-cascade": True, "foreign-frame": False, "malformed-frames": False},
}


def malformed_messages(guard: bytes) -> list[list[bytes]]:
    """Truncated or garbled messages a buggy or foreign peer could push."""
    return [
        [guard],
        [guard, b"1"],
        [guard, b"None", b"127.0.0.1"],
        [guard, b"not-a-room", b"127.0.0.1", b"1", b"agent"],
        [guard, b"\xff\xfe", b"x", b"y", b"z"],
        [b"ABORT"],
        [b"ABORT", b"\xff"],
        [b"ABORT", b"NaN", b"127.0.0.1", b"1"],
        [b""],
        [b"\x00" * 64, b"\x00"],
    ]


@dataclass
class CaseResult:
    """What one case observed (JSON-serialisable)."""

    case: str
    version: str
    variant: str  # "pristine" | "patched"
    thread_alive: bool
    workers_alive: bool
    probe_state: str  # KVPoll name of the probe room after its transfer info
    probe_final: str  # ... after its KV chunk
    rooms: dict[str, dict[str, int]] = field(default_factory=dict)  # group -> {state name: count}
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    thread_deaths: list[str] = field(default_factory=list)
    stopped_cleanly: bool = True


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.warnings: list[str] = []
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            line += f" [{type(exc).__name__}: {exc}]"
        if record.levelno >= logging.ERROR:
            self.errors.append(line)
        elif record.levelno >= logging.WARNING:
            self.warnings.append(line)


def _states(prefill: Any, rooms: Sequence[int]) -> dict[str, int]:
    return dict(Counter(prefill.status_name(r) for r in rooms))


def run_case(conn: Any, version: str, variant: str, case: str) -> CaseResult:
    """Run one case in this (runtime) process with the given conn module."""
    from pdfleet.patch import nixlcpu as nc

    capture = _Capture()
    logger = logging.getLogger(conn.__name__)
    logger.addHandler(capture)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    deaths: list[str] = []
    old_hook = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:  # nixlcpu's worker stop item
            return
        deaths.append(f"{args.thread.name if args.thread else '?'}: {args.exc_type.__name__}: {args.exc_value}")

    threading.excepthook = hook
    rooms: dict[str, dict[str, int]] = {}
    prefill = nc.CpuPrefill.start(conn)
    try:
        with nc.DecodePusher(prefill.endpoint) as decode:
            decode.send(nc.register_kv_args_frames(version))
            if case == "abort-cascade":
                for room in LIVE_ROOMS:
                    prefill.open_room(room)
                    if room % 2:
                        decode.send(nc.transfer_info_frames(version, room))
                prefill.wait_for(
                    lambda: sum(prefill.status_name(r) == "WaitingForInput" for r in LIVE_ROOMS) >= 50
                    or not prefill.bootstrap_alive()
                )
                for live, unknown in zip(LIVE_ROOMS, UNKNOWN_ROOMS, strict=True):
                    decode.send(nc.abort_frames(version, live))
                    decode.send(nc.abort_frames(version, unknown))
                prefill.wait_for(
                    lambda: all(prefill.status_name(r) == "Failed" for r in LIVE_ROOMS)
                    or not prefill.bootstrap_alive(),
                    timeout=10.0,
                )
                rooms = {"live": _states(prefill, LIVE_ROOMS), "unknown": _states(prefill, UNKNOWN_ROOMS)}
                # The prefill scheduler still sends KV for the rooms that were WaitingForInput; for the
                # first half its sender already concluded and cleared them (request_status popped).
                for room in CLEARED_ROOMS:
                    prefill.manager.request_status.pop(room, None)
                for room in CHUNKED_ROOMS:
                    prefill.enqueue_chunk(room)
            elif case == "foreign-frame":
                decode.send(FOREIGN_FRAMES)
            elif case == "malformed-frames":
                for msg in malformed_messages(nc.GUARD):
                    decode.send(msg)
            else:
                raise ValueError(f"unknown case {case!r}; cases: {', '.join(CASES)}")
            prefill.open_room(PROBE_ROOM)
            decode.send(nc.transfer_info_frames(version, PROBE_ROOM))
            probe_timeout = 5.0 if prefill.bootstrap_alive() else 0.5
            prefill.wait_for_status(PROBE_ROOM, "WaitingForInput", probe_timeout)
            probe_state = prefill.status_name(PROBE_ROOM)
            if probe_state == "WaitingForInput":
                prefill.enqueue_chunk(PROBE_ROOM)
                prefill.wait_for_status(PROBE_ROOM, "Success", 5.0)
            probe_final = prefill.status_name(PROBE_ROOM)
            if case == "abort-cascade":  # the probe's chunk came after theirs on the same worker queue
                rooms["chunked"] = _states(prefill, [r for r in CHUNKED_ROOMS if r not in CLEARED_ROOMS])
        alive, workers = prefill.bootstrap_alive(), prefill.transfer_workers_alive()
    finally:
        seen_deaths, warnings, errors = list(deaths), list(capture.warnings), list(capture.errors)
        stopped = prefill.stop()  # what dies of the shutdown itself is not counted
        threading.excepthook = old_hook
        logger.removeHandler(capture)
        logger.setLevel(old_level)
    return CaseResult(
        case=case, version=version, variant=variant, thread_alive=alive, workers_alive=workers,
        probe_state=probe_state, probe_final=probe_final, rooms=rooms, warnings=warnings,
        errors=errors, thread_deaths=seen_deaths, stopped_cleanly=stopped,
    )


def evaluate(result: CaseResult) -> list[str]:
    """Why ``result`` is not what its version and variant should do; empty when it is as expected."""
    problems: list[str] = []
    want_alive = True if result.variant == "patched" else EXPECTED_ALIVE[result.version][result.case]
    if result.thread_alive != want_alive:
        problems.append(f"bootstrap thread alive={result.thread_alive}, expected {want_alive}")
    if not result.stopped_cleanly:
        problems.append("threads did not stop at teardown")
    if not want_alive:
        if result.probe_state != "Bootstrapping":
            problems.append(f"probe room is {result.probe_state} though the thread should be dead")
        return problems
    if result.probe_final != "Success":
        problems.append(f"probe room ended {result.probe_final} (state after info: {result.probe_state}),"
                        " expected WaitingForInput then Success")
    if not result.workers_alive:
        problems.append("a transfer worker died")
    deaths = [line for line in result.errors if any(s in line for s in DEATH_SIGNATURES)]
    if result.thread_deaths or deaths:
        problems.append(f"thread death logged: {(result.thread_deaths + deaths)[:2]}")
    if any(WORKER_ERROR in line for line in result.errors):
        problems.append("the transfer worker logged an error")
    if result.case == "abort-cascade":
        if result.rooms.get("live") != {"Failed": len(LIVE_ROOMS)}:
            problems.append(f"live rooms after the ABORT burst: {result.rooms.get('live')}, expected all Failed")
        chunked = len([r for r in CHUNKED_ROOMS if r not in CLEARED_ROOMS])
        if result.rooms.get("chunked") != {"Failed": chunked}:
            problems.append(f"aborted rooms after their KV chunks: {result.rooms.get('chunked')}, "
                            "expected still Failed (skipped)")
        if result.rooms.get("unknown") != {"unknown": len(UNKNOWN_ROOMS)}:
            problems.append(f"unknown rooms after the burst: {result.rooms.get('unknown')}, expected none created")
    if result.case == "foreign-frame" and not any("unexpected leading frame" in w for w in result.warnings):
        problems.append("no WARNING with 'unexpected leading frame' for the foreign message")
    return problems


class WedgeRunError(PdfleetError):
    """The cases could not be run (runtime missing, runner crashed); exit code 2."""


def run_cases(
    version: str, patched: bool, cases: Sequence[str] = CASES, runtime_root: Path | None = None,
    conn_file: Path | None = None, timeout: float = 600.0,
) -> list[CaseResult]:
    """Run ``cases`` in the runtime python for ``version``, on its pristine or patched conn.py.

    ``conn_file`` replaces the runtime's own pristine/patched copy (e.g. a scratch copy to check).
    """
    from pdfleet.patch.runtime import Runtime, default_root

    rt = Runtime(runtime_root or default_root())
    if not rt.is_ready(version):
        raise WedgeRunError(f"the runtime for SGLang {version} is not built in {rt.root}: run "
                            f"`python -m pdfleet.patch.runtime {version}` (or `pdfleet patch check`) first")
    with tempfile.TemporaryDirectory(prefix="pdfleet-wedge-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [str(rt.python), "-m", "pdfleet.patch.wedge", "--version", version,
               "--conn-file", str(conn_file or rt.conn_file(version, patched)),
               "--variant", "patched" if patched else "pristine", "--out", str(out), *cases]
        try:
            proc = subprocess.run(cmd, env=rt.env(version), capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            raise WedgeRunError(f"the wedge runner for {version} ran past {timeout:.0f}s; "
                                "a case is stuck: run it by hand with `python -m pdfleet.patch.wedge`") from e
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
            raise WedgeRunError(f"the wedge runner failed (exit {proc.returncode}):\n{tail}")
        return [CaseResult(**r) for r in json.loads(out.read_text())]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point inside the runtime python: run cases, write a JSON list of CaseResult."""
    parser = argparse.ArgumentParser(prog="python -m pdfleet.patch.wedge")
    parser.add_argument("--version", required=True)
    parser.add_argument("--conn-file", required=True, type=Path)
    parser.add_argument("--variant", required=True, choices=("pristine", "patched"))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("cases", nargs="*", default=list(CASES))
    args = parser.parse_args(argv)
    from pdfleet.patch import nixlcpu

    conn = nixlcpu.load_conn_module(args.conn_file)
    results = [asdict(run_case(conn, args.version, args.variant, c)) for c in args.cases]
    args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
