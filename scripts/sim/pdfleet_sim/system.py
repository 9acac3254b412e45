"""Host-side plumbing: running commands, root/tool checks, cgroups, mounts, safe removal."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .hosttypes import Progress, SimError

REQUIRED_TOOLS = {
    "systemd-nspawn": "systemd-container",
    "mmdebstrap": "mmdebstrap",
    "nft": "nftables",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
}

CGROUP_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/systemd"))
CGROUP_GROUP = "pdfleet-sim"


def require_root(action: str) -> None:
    if os.geteuid() != 0:
        raise SimError(
            f"`{action}` needs root: it creates a bridge, nftables rules, overlay mounts and "
            "systemd-nspawn containers. Run it as root (e.g. `sudo pdfleet sim ...`)."
        )


def missing_tools() -> list[str]:
    """Debian packages whose commands are missing on this machine."""
    return sorted({pkg for tool, pkg in REQUIRED_TOOLS.items() if shutil.which(tool) is None})


def require_tools() -> None:
    missing = missing_tools()
    if missing:
        raise SimError(
            "the simulated cluster needs these packages on this machine: "
            f"{' '.join(missing)}. Install them: apt-get install -y {' '.join(missing)}"
        )


def run(
    cmd: Sequence[str], *, check: bool = True, input_text: str | None = None, timeout: float | None = 120
) -> subprocess.CompletedProcess[str]:
    """Run a short command, capture its output, and turn a failure into a SimError."""
    try:
        proc = subprocess.run(list(cmd), input=input_text, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise SimError(f"`{' '.join(cmd)}` did not finish within {timeout} s") from exc
    if check and proc.returncode != 0:
        raise SimError(
            f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}"
        )
    return proc


def run_logged(
    cmd: Sequence[str],
    *,
    log: Path,
    progress: Progress,
    label: str,
    every_s: float = 10.0,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    timeout_s: float = 3600,
) -> None:
    """Run a long command with its output in `log`; every `every_s` seconds report the elapsed time and
    the latest output line, also while the command prints nothing."""
    import threading

    start = time.monotonic()
    last_line = [""]
    log.parent.mkdir(parents=True, exist_ok=True)
    with (
        log.open("w") as out,
        subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            preexec_fn=preexec_fn,
        ) as proc,
    ):
        stdout = proc.stdout
        assert stdout is not None

        def pump() -> None:
            for line in stdout:
                out.write(line)
                if line.strip():
                    last_line[0] = line.strip()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        while True:
            try:
                rc = proc.wait(timeout=every_s)
                break
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - start
                if elapsed > timeout_s:
                    proc.kill()
                    proc.wait()
                    raise SimError(f"{label} took longer than {timeout_s:.0f} s; see {log}") from None
                progress(f"{label}: {elapsed:.0f} s, {last_line[0][:100]}")
        reader.join(timeout=10)
    if rc != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise SimError(f"{label} failed (exit {rc}); see {log}:\n" + "\n".join(tail))


# ---------------------------------------------------------------- processes


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as dead.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


# ---------------------------------------------------------------- cgroups
# The host's cgroups are hybrid v1/v2 and there is no host systemd: every container wrapper is put in
# its own group (pdfleet-sim/<group>) in both the unified and the name=systemd hierarchy before
# systemd-nspawn starts, so that the containers never share one `payload` cgroup.


def cgroup_dirs(group: str) -> list[Path]:
    return [root / CGROUP_GROUP / group for root in CGROUP_ROOTS if root.is_dir()]


def cgroup_joiner(group: str) -> Callable[[], None]:
    """A preexec_fn that moves the child into its own cgroup (created here, in the parent)."""
    dirs = cgroup_dirs(group)
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)

    def join() -> None:
        pid = str(os.getpid())
        for d in dirs:
            (d / "cgroup.procs").write_text(pid)

    return join


def cgroup_pids(group: str) -> set[int]:
    """Every process anywhere under the group, in any hierarchy."""
    pids: set[int] = set()
    for d in cgroup_dirs(group):
        # os.walk ignores directories that vanish meanwhile (the container's systemd removes its own).
        for dirpath, _dirs, _files in os.walk(d):
            with contextlib.suppress(OSError):
                pids.update(int(x) for x in Path(dirpath, "cgroup.procs").read_text().split())
    return pids


def kill_cgroup(group: str, timeout_s: float = 5.0) -> None:
    """SIGKILL everything left in the group, then remove its directories."""
    for _ in range(20):
        pids = cgroup_pids(group)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not cgroup_pids(group), timeout_s / 20)
    remove_cgroup(group)


def remove_cgroup(group: str) -> None:
    for d in cgroup_dirs(group):
        if not d.exists():
            continue
        # Deepest first; cgroup directories are removed with rmdir, never unlink.
        for dirpath, _dirs, _files in os.walk(d, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
        with contextlib.suppress(OSError):
            d.rmdir()
        with contextlib.suppress(OSError):
            d.parent.rmdir()  # pdfleet-sim itself, once empty


# ---------------------------------------------------------------- mounts


def mounts_under(path: Path) -> list[Path]:
    """Mount points at or below `path`, deepest first."""
    base = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            mnt = line.split()[4].replace("\\040", " ")
            if mnt == base or mnt.startswith(base.rstrip("/") + "/"):
                found.append(Path(mnt))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def is_mountpoint(path: Path) -> bool:
    return Path(os.path.realpath(path)) in mounts_under(path)


def unmount_all(path: Path) -> None:
    for mnt in mounts_under(path):
        proc = run(["umount", str(mnt)], check=False)
        if proc.returncode != 0:
            run(["umount", "--lazy", str(mnt)])


@contextlib.contextmanager
def lock_file(path: Path) -> Iterator[None]:
    """An exclusive flock held for the duration of the block (serialises concurrent `up`/`down`)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def safe_rmtree(path: Path) -> None:
    """Remove a tree, after unmounting anything below it; never descends through a mount."""
    if not path.exists() and not path.is_symlink():
        return
    unmount_all(path)
    if mounts_under(path):
        raise SimError(f"refusing to delete {path}: something is still mounted below it")
    shutil.rmtree(path)


# ---------------------------------------------------------------- host preparation for systemd-nspawn
# Without a host systemd, nspawn finds neither a tmpfs on /run/systemd/nspawn nor the
# /run/systemd/inaccessible nodes it bind-mounts over masked paths; provide both and remember what was
# created so the last `down` can take it away again.

HOSTPREP_STATE = Path("/run/pdfleet-sim/hostprep.json")
NSPAWN_RUN = Path("/run/systemd/nspawn")
INACCESSIBLE = Path("/run/systemd/inaccessible")
_INACCESSIBLE_NODES = {"reg": "file", "dir": "dir", "chr": "c", "blk": "b", "fifo": "p"}


def _load_hostprep() -> dict[str, object]:
    import json

    try:
        return json.loads(HOSTPREP_STATE.read_text())
    except (OSError, ValueError):
        return {}


def _save_hostprep(state: dict[str, object]) -> None:
    import json

    HOSTPREP_STATE.parent.mkdir(parents=True, exist_ok=True)
    HOSTPREP_STATE.write_text(json.dumps(state, indent=2))


def prepare_nspawn_host() -> None:
    state = _load_hostprep()
    if not is_mountpoint(NSPAWN_RUN):
        if not NSPAWN_RUN.exists():
            NSPAWN_RUN.mkdir(parents=True)
            state["created_nspawn_dir"] = True
        run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(NSPAWN_RUN)])
        state["mounted_nspawn_tmpfs"] = True
        _save_hostprep(state)
    created = list(state.get("created_inaccessible", []))  # type: ignore[call-overload]
    if not INACCESSIBLE.exists():
        INACCESSIBLE.mkdir(parents=True, mode=0o755)
        created.append(str(INACCESSIBLE))
    for name, kind in _INACCESSIBLE_NODES.items():
        node = INACCESSIBLE / name
        if node.exists():
            continue
        if kind == "file":
            node.touch(mode=0)
        elif kind == "dir":
            node.mkdir(mode=0)
        elif kind == "p":
            os.mkfifo(node, 0)
        else:
            import stat

            mode = stat.S_IFCHR if kind == "c" else stat.S_IFBLK
            os.mknod(node, mode, os.makedev(0, 0))
        node.chmod(0)
        created.append(str(node))
    state["created_inaccessible"] = created
    _save_hostprep(state)


def undo_nspawn_host() -> None:
    """Undo `prepare_nspawn_host` (call only when no sim container runs any more)."""
    state = _load_hostprep()
    if state.get("mounted_nspawn_tmpfs") and is_mountpoint(NSPAWN_RUN):
        run(["umount", str(NSPAWN_RUN)], check=False)
        if is_mountpoint(NSPAWN_RUN):
            return  # still in use (by some other nspawn); keep the record for the next `down`
    if state.get("created_nspawn_dir"):
        with contextlib.suppress(OSError):
            NSPAWN_RUN.rmdir()
    for node in reversed([Path(p) for p in state.get("created_inaccessible", [])]):  # type: ignore[attr-defined]
        with contextlib.suppress(OSError):
            if node.is_dir():
                node.rmdir()
            else:
                node.unlink()
    with contextlib.suppress(OSError):
        HOSTPREP_STATE.unlink()
    with contextlib.suppress(OSError):
        HOSTPREP_STATE.parent.rmdir()
