"""The simulated hosts' images, built by a process of their own while other work goes on.

`start` launches ``python -m pdfleet_sim.build`` detached, unless the CPU runtime is built already or a build of it
is under way. That process builds the golden image while the runtime's wheels download, then installs the runtime
into its final directory (image.build_runtime). It holds the runtime's build lock from before it starts until it
ends, so :func:`image.ensure_runtime` in any other process waits for it, and builds the runtime itself should this
build fail. Its output goes to ``background-build.log`` in the cache directory.

Two callers:
  - ``make site`` starts it before the project venv installs (with this machine's python3: the module needs only
    the standard library and pdfleet.patch.runtime), so the image and the runtime build meanwhile;
  - ``pdfleet sim up --runtime-later`` starts it (when ``make site`` did not), starts the hosts once the golden
    image is ready, and site.yml waits for the runtime (``pdfleet sim runtime``) only before the deploy needs it.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from . import image
from .hosttypes import DEFAULT_CACHE_DIR, Progress, SimError
from .system import prepare_nspawn_host, require_root, require_tools

LOG_NAME = "background-build.log"


def start(cache_dir: Path, progress: Progress) -> int | None:
    """Start the background build unless the runtime is built or being built; its pid, else None."""
    final = image.runtime_path(cache_dir, image.golden_path(cache_dir))
    if image.runtime_built(final):
        return None
    prepare_nspawn_host()  # here, before any builder could race another process to it
    final.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(image.lock_path(final), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"a build of {final.name} is under way already")
            return None
        if image.runtime_built(final):  # finished between the first look and the lock
            return None
        log = cache_dir / LOG_NAME
        with log.open("ab") as out:
            # The child inherits the locked file description: the lock is held without a gap until it exits.
            proc = subprocess.Popen(
                [sys.executable, "-m", "pdfleet_sim.build", "--cache-dir", str(cache_dir), "--lock-fd", str(fd)],
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    finally:
        os.close(fd)
    progress(f"the golden image and the CPU runtime build in the background (pid {proc.pid}; log {log})")
    return proc.pid


def _build(cache_dir: Path, progress: Progress) -> None:
    """The child's work; the caller holds the runtime's build lock."""
    golden_final = image.golden_path(cache_dir)
    final = image.runtime_path(cache_dir, golden_final)
    if image.runtime_built(final):
        return
    golden, wheelhouse = image.golden_and_wheels(cache_dir, progress)
    image.build_runtime(golden, final, image.labelled(progress, "runtime"), wheelhouse)


def _stamped(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [pid {os.getpid()}] {msg}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdfleet_sim.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--start", action="store_true", help="start the build detached and return")
    parser.add_argument("--lock-fd", type=int, help=argparse.SUPPRESS)  # the child's inherited lock
    args = parser.parse_args(argv)
    if args.start:
        try:
            require_root("python -m pdfleet_sim.build --start")
            require_tools()
            start(args.cache_dir, lambda msg: print(f"pdfleet: {msg}", file=sys.stderr))
        except SimError as exc:  # `make site` goes on: `pdfleet sim up` builds what this did not, or says why not
            print(f"pdfleet: the sim images do not build ahead: {exc}", file=sys.stderr)
        return 0
    if args.lock_fd is None:
        parser.error("--start, or --lock-fd (the builder process started by --start)")
    try:
        _build(args.cache_dir, _stamped)
    except BaseException:  # the lock goes with this process: the next `ensure_runtime` builds it again
        _stamped("build failed:\n" + traceback.format_exc())
        return 1
    _stamped("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
