"""Supervisor for one simulated host: runs systemd-nspawn, restarts it after an in-container reboot.

Started detached by `hosts.start_host` as `python wrapper.py -- systemd-nspawn ...`; stdlib only, so it
runs under any interpreter. SIGTERM/SIGINT are forwarded to systemd-nspawn, which halts the container's
systemd cleanly; the wrapper then exits. Under `--keep-unit` an in-container reboot makes nspawn exit with
133: start it again.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import FrameType

REBOOT_EXIT = 133


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: wrapper.py -- systemd-nspawn ...", file=sys.stderr)
        return 2
    cmd = argv[argv.index("--") + 1 :]
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while True:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        if stopping:
            child.send_signal(signal.SIGTERM)
        rc = child.wait()
        if stopping or rc != REBOOT_EXIT:
            print(f"pdfleet-sim wrapper: systemd-nspawn exited with {rc}", flush=True)
            return rc
        print("pdfleet-sim wrapper: container rebooted, starting it again", flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
