"""The real SGLang wedge on a LocalPD pair, and the pair's logs read the way the watchdog reads a journal.

:func:`runtime_pd_env` is the environment of simulated workers that run SGLang's real NIXL ``conn.py`` from the
heavy CPU runtime (:mod:`pdfleet.patch.runtime`), pristine or patched. :func:`foreign_frame` pushes one frame
whose leading part is neither GUARD nor ABORT into ONE prefill rank's bootstrap socket (the rank's address as its
bootstrap server lists it): the pristine bootstrap thread of that rank dies on SGLang's own
``assert ... "First message should be ... Foreign traffic?"`` and Python prints its traceback; the other ranks
live on, and every request that needs the dead rank waits for ever (the wedge). Nothing here prints a
signature: what the logs show is what SGLang's code and Python's thread report wrote.

:class:`FileJournal` answers :func:`pdfleet.watchdog.journal.journal_command` from the LocalPD's log files (one
invocation per file, byte offsets as cursors), so a :class:`~pdfleet.watchdog.journal.JournalWatch` reads a
local pair's output as it reads a unit's journal on a host.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pdfleet.watchdog.journal import CURSOR_PREFIX, INVOCATION_PREFIX

from pdfleet_sim.paths import import_roots

SGLANG_VERSION = "0.5.15.post1"
FOREIGN = [b"PDFLEET-UNKNOWN-FRAME", b"x"]


def runtime_pd_env(rt: Any, patched: bool, version: str = SGLANG_VERSION) -> dict[str, str]:
    """Worker environment for the runtime python: the real KV backend on the given copy of conn.py (the runtime's
    PYTHONPATH, the overlay and pdfleet, plus pdfleet_sim: the stand-in workers are not in the runtime)."""
    env = rt.env(version)
    return {**env, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], *import_roots()]),
            "PDFLEET_SIM_CONN_FILE": str(rt.conn_file(version, patched)),
            "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"}


def rank_sockets(host: str, bootstrap_port: int, timeout_s: float = 10.0) -> list[tuple[str, int]]:
    """Every prefill TP rank's (ip, port), as the prefill's bootstrap server lists them (``GET /route``)."""
    base = f"http://{host}:{bootstrap_port}/route"
    with urllib.request.urlopen(f"{base}?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1",
                                timeout=timeout_s) as r:
        tp = int(json.loads(r.read())["attn_tp_size"])
    out = []
    for rank in range(tp):
        with urllib.request.urlopen(f"{base}?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank={rank}"
                                    "&target_pp_rank=0", timeout=timeout_s) as r:
            info = json.loads(r.read())
        out.append((str(info["rank_ip"]), int(info["rank_port"])))
    return out


def foreign_frame(host: str, bootstrap_port: int, rank: int = 0) -> tuple[str, int]:
    """One unknown leading frame to prefill TP rank ``rank``'s bootstrap socket; the socket it went to."""
    import zmq

    ip, port = rank_sockets(host, bootstrap_port)[rank]
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, 5000)
    try:
        s.connect(f"tcp://{ip}:{port}")
        s.send_multipart(FOREIGN)
    finally:
        s.close()  # LINGER: close waits until the frame is handed to the peer (or 5 s)
    return ip, port


class FileJournal:
    """A ``JournalWatch`` runner over log files: unit name -> file (see module doc)."""

    _UNIT = re.compile(r"systemctl show -p InvocationID --value ([^\s)]+)")
    _AFTER = re.compile(r"--after-cursor (\d+)")

    def __init__(self, files: Mapping[str, Path]) -> None:
        self.files = dict(files)

    def __call__(self, host: str, command: str) -> tuple[int, str, str]:
        del host
        unit = self._UNIT.search(command)
        if unit is None or unit.group(1) not in self.files:
            return 1, "", f"no log file for the command {command!r}"
        path = self.files[unit.group(1)]
        after = self._AFTER.search(command)
        start = int(after.group(1)) if after else 0
        try:
            data = path.read_bytes()
            invocation = str(path.stat().st_ino)
        except OSError as e:
            return 1, "", str(e)
        end = data.rfind(b"\n") + 1  # whole lines only; a line being written is read next round
        body = data[start:end].decode(errors="replace") if end > start else ""
        cursor = max(start, end)
        return 0, f"{INVOCATION_PREFIX}{invocation}\n{body}{CURSOR_PREFIX}{cursor}\n", ""
