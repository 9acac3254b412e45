"""The golden root filesystem the simulated hosts boot from, and the heavy Python runtime venv.

Both are built once and cached outside the repository, keyed by a hash of their recipe, built in a
temporary directory next to the final one and renamed into place, so a crash never leaves half an image.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pdfleet.patch.cpu_requirements import BASE_REQUIREMENTS

from .hosttypes import Progress, SimError
from .system import cgroup_joiner, pid_alive, remove_cgroup, run, run_logged, safe_rmtree

SUITE = "bookworm"


def debian_mirror() -> str:
    """The Debian mirror this machine's apt already uses (mmdebstrap needs one; none is hard-coded)."""
    for path in _APT_SOURCES:
        p = Path(path)
        if not p.is_file():
            continue
        for line in p.read_text().splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and len(words) > 1 and "security" not in words[1]:
                return words[1]
            if words[:1] == ["deb"] and len(words) > 2:
                uri = next(w for w in words[1:] if not w.startswith("["))
                if "security" not in uri:
                    return uri
    raise SimError(
        f"no Debian mirror found in {', '.join(_APT_SOURCES)}; configure apt on this machine first "
        "(the golden image is built from the same mirror)"
    )

GOLDEN_PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-venv",
    "python3-pip",
    "sudo",
    "iproute2",
    "ca-certificates",
    "python3-apt",
    "libnss-myhostname",
    "patch",
    "curl",
    "procps",
    "iputils-ping",
)

# Run inside the freshly bootstrapped tree (chroot). Seals the image: no machine-id, no SSH host keys
# (each host gets its own at creation), no apt lists and an old mtime on the lists directory (so
# `apt: cache_valid_time` refreshes instead of trusting an empty cache).
SETUP_SCRIPT = r"""
set -eu
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
systemctl enable systemd-networkd.service ssh.service
# No console to log in on: the console and container gettys would only fail or idle.
systemctl mask console-getty.service container-getty@.service getty.target
# Nothing to resize or remount in a container; these would fail the boot.
systemctl mask systemd-remount-fs.service
mkdir -p /etc/ssh/sshd_config.d /root/.ssh
chmod 700 /root/.ssh
cat > /etc/ssh/sshd_config.d/10-pdfleet-sim.conf <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
MaxStartups 100:30:200
MaxSessions 100
CONF
rm -f /etc/ssh/ssh_host_*
# Trust the same local CAs as this machine (copied to /usr/local/share/ca-certificates), e.g. for pip.
update-ca-certificates >/dev/null
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
ln -s /etc/machine-id /var/lib/dbus/machine-id
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/dpkg.log /root/.cache
touch -d 2000-01-01 /var/lib/apt/lists
"""

# The heavy Python runtime the simulated SGLang workers use; extend this one list.
# The simulated workers import SGLang's real NIXL code: the same CPU runtime the patch tests use (one list,
# in pdfleet.patch.runtime); the version-specific packages go into each host's service venv (the sglang role).
RUNTIME_PACKAGES: tuple[str, ...] = BASE_REQUIREMENTS
RUNTIME_MOUNT = "/opt/pdfleet-runtime"

# Package indexes on this machine's disk; bind-mounted read-only at the same paths in every container.
LOCAL_PIP_DIRS: tuple[str, ...] = ("/opt/pypi", "/opt/pypi-more", "/opt/wheels")
# Mount points for the read-only binds (the golden tree itself is never written after the build).
SETUP_SCRIPT += f"mkdir -p {RUNTIME_MOUNT} {' '.join(LOCAL_PIP_DIRS)}\n"

# This machine's apt sources and pip configuration, copied into the image at the same paths.
_APT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/debian.sources")
_PIP_CONFIGS = ("/etc/pip.conf", "/etc/xdg/pip/pip.conf", "/root/.config/pip/pip.conf")


def host_files() -> dict[str, str]:
    """Files copied from this machine into the image (path in image -> content)."""
    files: dict[str, str] = {}
    for path in _APT_SOURCES:
        p = Path(path)
        if p.is_file() and p.read_text().strip():
            files[path] = p.read_text()
    if not files:
        raise SimError(f"no apt sources in {', '.join(_APT_SOURCES)}; configure apt on this machine first")
    # Replace mmdebstrap's own sources.list, which would repeat the deb822 sources.
    files.setdefault("/etc/apt/sources.list", "# See /etc/apt/sources.list.d/\n")
    for path in _PIP_CONFIGS:
        p = Path(path)
        if p.is_file():
            files[path] = p.read_text()
            # Files a pip config refers to (e.g. `constraint = /etc/xdg/pip/constraints.txt`).
            for line in p.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() in {"constraint", "requirement"} and Path(value.strip()).is_file():
                    files[value.strip()] = Path(value.strip()).read_text()
    for cert in sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt")):
        files[str(cert)] = cert.read_text()
    pip_env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("PIP_")}
    if pip_env:
        files["/etc/environment"] = "".join(f'{k}="{v}"\n' for k, v in pip_env.items())
    return files


# mmdebstrap, not debootstrap: apt fetches the packages in parallel (about 20 s against debootstrap's 55 s for this
# package set, measured on the 2-core development machine). Its merged-usr hook merges /usr as debootstrap does for
# bookworm (usr-is-merged, not the usrmerge package and the perl it pulls in): the same packages as debootstrap's.
MMDEBSTRAP_HOOKS = Path("/usr/share/mmdebstrap/hooks/merged-usr")


def golden_recipe() -> dict[str, object]:
    return {
        "builder": "mmdebstrap minbase merged-usr",
        "suite": SUITE,
        "mirror": debian_mirror(),
        "packages": list(GOLDEN_PACKAGES),
        "setup": SETUP_SCRIPT,
        "host_files": host_files(),
    }


def recipe_hash(recipe: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def golden_path(cache_dir: Path) -> Path:
    return cache_dir / f"golden-{recipe_hash(golden_recipe())}"


def _runtime_script(wheel_groups: list[list[str]] | None = None) -> str:
    """The runtime's install, run in the golden image. From the package indexes: one pip resolves and installs.
    From the prefetched wheels (`wheel_groups`: the wheelhouse's files, already the resolved set, split by size):
    one pip per group at the same time, without resolving (the unpacking of ~6 GB is the cost, and pip unpacks on
    one core), then `pip check` proves the set consistent."""
    pip = f"{RUNTIME_MOUNT}/bin/pip"
    check = "import torch, numpy, zmq; print('torch', torch.__version__)"
    freeze = f"{pip} freeze"
    if wheel_groups is None:
        install = f"{pip} install --no-input {' '.join(RUNTIME_PACKAGES)}; "
    else:
        installs = [f"{pip} install --no-input --no-deps {' '.join(group)}" for group in wheel_groups if group]
        install = "".join(f"{cmd} & pids=\"$pids $!\"; " for cmd in installs)
        install = f"pids=; {install}for p in $pids; do wait $p; done; {pip} check; "
        freeze = f"{pip} list --format=freeze"  # name==version, not the wheel files' paths
    return (
        f"set -eu; python3 -m venv {RUNTIME_MOUNT}; "
        f"{install}"
        f"{freeze} > {RUNTIME_MOUNT}/pdfleet-freeze.txt; "
        f'{RUNTIME_MOUNT}/bin/python -c "{check}"'
    )


def wheel_groups(wheelhouse: Path, count: int) -> list[list[str]]:
    """The wheelhouse's wheels in `count` groups of about equal size (largest first, each to the lightest group),
    as paths under the runtime's mount point."""
    groups: list[tuple[int, list[str]]] = [(0, []) for _ in range(count)]
    for size, name in sorted(((w.stat().st_size, w.name) for w in wheelhouse.glob("*.whl")), reverse=True):
        total, names = min(groups, key=lambda g: g[0])
        groups.remove((total, names))
        groups.append((total + size, [*names, f"{RUNTIME_MOUNT}/{_WHEELHOUSE}/{name}"]))
    return [sorted(names) for _, names in groups]


def runtime_recipe(golden: Path) -> dict[str, object]:
    return {
        "golden": golden.name,
        "packages": list(RUNTIME_PACKAGES),
        "mount": RUNTIME_MOUNT,
        "script": _runtime_script(),
    }


def runtime_path(cache_dir: Path, golden: Path) -> Path:
    return cache_dir / f"runtime-{recipe_hash(runtime_recipe(golden))}"


def _clean_stale_builds(cache_dir: Path, progress: Progress) -> None:
    """Remove temporary build trees left by a crashed build (their builder process is gone)."""
    for tmp in cache_dir.glob(".tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and pid_alive(int(pid)):
            continue
        progress(f"removing stale build {tmp}")
        safe_rmtree(tmp)


def _finish(tmp: Path, final: Path, recipe: dict[str, object]) -> None:
    (tmp.parent / f"{tmp.name}.json").write_text(json.dumps(recipe, indent=2, sort_keys=True))
    try:
        tmp.rename(final)
    except OSError:
        if final.is_dir():  # another builder won the race; keep its tree
            safe_rmtree(tmp)
            (tmp.parent / f"{tmp.name}.json").unlink(missing_ok=True)
            return
        raise
    (tmp.parent / f"{tmp.name}.json").rename(final.parent / f"{final.name}.json")


def lock_path(final: Path) -> Path:
    return final.parent / f".{final.name}.lock"


@contextlib.contextmanager
def build_lock(final: Path, progress: Progress) -> Iterator[None]:
    """The exclusive lock of one cached part's build (an flock on `.<name>.lock` beside it): a second process that
    wants the part waits for the first one's build instead of building another copy."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(final), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another process's build of {final.name} "
                     f"(its log: {final.parent / f'{final.name}.build.log'})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_golden(cache_dir: Path, progress: Progress) -> Path:
    """Return the cached golden image, building it first if its recipe changed (about 20 s)."""
    final = golden_path(cache_dir)
    if final.is_dir():
        return final
    with build_lock(final, progress):
        return final if final.is_dir() else _build_golden(cache_dir, final, progress)


def _build_golden(cache_dir: Path, final: Path, progress: Progress) -> Path:
    recipe = golden_recipe()
    cache_dir.mkdir(parents=True, exist_ok=True)
    _clean_stale_builds(cache_dir, progress)
    tmp = cache_dir / f".tmp-{final.name}-{os.getpid()}"
    start = time.monotonic()
    if not MMDEBSTRAP_HOOKS.is_dir():
        raise SimError(f"{MMDEBSTRAP_HOOKS} is missing: the golden image needs mmdebstrap 1.0 or newer with its "
                       "merged-usr hook; install the mmdebstrap package (scripts/host-packages.sh does)")
    progress(f"building golden image {final.name} (mmdebstrap {SUITE}, about 20 s)")
    try:
        tmp.mkdir()
        run_logged(
            [
                "mmdebstrap",
                "--mode=root",
                "--variant=minbase",
                f"--hook-dir={MMDEBSTRAP_HOOKS}",
                f"--include={','.join(GOLDEN_PACKAGES)}",
                SUITE,
                str(tmp),
                debian_mirror(),
            ],
            log=cache_dir / f"{final.name}.build.log",
            progress=progress,
            label="mmdebstrap",
        )
        for path, content in host_files().items():
            target = tmp / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        run(["chroot", str(tmp), "/bin/sh", "-c", SETUP_SCRIPT], timeout=300)
        (tmp / "etc/pdfleet-sim-image").write_text(final.name + "\n")
        _finish(tmp, final, recipe)
    except BaseException:
        safe_rmtree(tmp)
        raise
    progress(f"golden image ready in {time.monotonic() - start:.0f} s: {final}")
    return final


def nspawn_chroot_cmd(root: Path, *, binds: dict[str, str], ro_binds: list[str], command: str,
                      pip_env: dict[str, str] | None = None) -> list[str]:
    """systemd-nspawn as a chroot with /proc, /dev and /sys set up (no boot, root tree read-only)."""
    cmd = [
        "systemd-nspawn",
        "--quiet",
        "--register=no",
        "--keep-unit",
        "--pipe",
        "--read-only",
        f"--directory={root}",
        "--resolv-conf=bind-host",
        "--timezone=off",
        "--tmpfs=/tmp",
        "--tmpfs=/var/tmp",
    ]
    cmd += [f"--bind={src}:{dst}" for src, dst in binds.items()]
    cmd += [f"--bind-ro={p}" for p in ro_binds if Path(p).is_dir()]
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_")} | (pip_env or {})
    cmd += [f"--setenv={k}={v}" for k, v in sorted(env.items())]
    return [*cmd, "--setenv=PIP_NO_CACHE_DIR=1", "--", "/bin/sh", "-c", command]


def runtime_built(final: Path) -> bool:
    """The runtime is built into its final directory (bind-mounted by hosts that start before it is done); its
    recipe file beside it is written last, so it marks a finished build."""
    return final.is_dir() and (final.parent / f"{final.name}.json").is_file()


def ensure_runtime(golden: Path, cache_dir: Path, progress: Progress, wheelhouse: Path | None = None) -> Path:
    """Return the cached heavy Python runtime venv, building it if needed (about a minute from prefetched wheels,
    ~6 GB). A build another process has under way (`pdfleet sim up --runtime-later`) is waited for.

    With `wheelhouse` (from :func:`prefetch_runtime_wheels`) pip installs from it alone, offline; should that
    fail, the build runs again from the package indexes. The recipe, hence the cache key, is the same."""
    final = runtime_path(cache_dir, golden)
    try:
        if not runtime_built(final):
            with build_lock(final, progress):
                if not runtime_built(final):
                    build_runtime(golden, final, progress, wheelhouse)
                    wheelhouse = None  # the build took it
    finally:
        if wheelhouse is not None:
            safe_rmtree(wheelhouse)
    return final


def build_runtime(golden: Path, final: Path, progress: Progress, wheelhouse: Path | None) -> None:
    """Build the runtime into `final` (the caller holds its build lock). In place, not renamed into place: a host
    started before the build finished has the directory bind-mounted already. Whatever a crashed build left in it
    is emptied first, and the recipe file beside it, the mark of a finished build, is written last."""
    from .system import prepare_nspawn_host

    recipe = runtime_recipe(golden)
    prepare_nspawn_host()
    marker = final.parent / f"{final.name}.json"
    marker.unlink(missing_ok=True)
    final.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    progress(f"building Python runtime {final.name}: {' '.join(RUNTIME_PACKAGES)} (about a minute)")
    group = f"_build-{os.getpid()}"
    try:
        _empty(final)
        if wheelhouse is not None:
            # Inside the runtime's own bind mount, so the golden tree needs no extra mount point.
            wheelhouse.rename(final / _WHEELHOUSE)
            try:
                _install_runtime(golden, final, progress, group, offline=True)
            except SimError as exc:
                progress(f"installing from the prefetched wheels failed ({str(exc).splitlines()[0]}); "
                         "installing from the package indexes")
                _empty(final)
                _install_runtime(golden, final, progress, group, offline=False)
            safe_rmtree(final / _WHEELHOUSE)
        else:
            _install_runtime(golden, final, progress, group, offline=False)
        marker.write_text(json.dumps(recipe, indent=2, sort_keys=True))
    except BaseException:
        _empty(final)
        raise
    finally:
        remove_cgroup(group)
    size = sum(f.stat().st_size for f in final.rglob("*") if f.is_file() and not f.is_symlink())
    progress(f"Python runtime ready in {time.monotonic() - start:.0f} s ({size / 2**30:.1f} GiB): {final}")


def _empty(directory: Path) -> None:
    """Remove what a directory holds, keeping the directory itself (a bind mount's source)."""
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            safe_rmtree(child)
        else:
            child.unlink()


_WHEELHOUSE = ".pdfleet-wheelhouse"
# The golden image's interpreter (Debian bookworm's python3) and the wheel platforms its glibc 2.36 runs.
GOLDEN_PYTHON = "3.11"
_PLATFORMS = ("manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64",
              *(f"manylinux_2_{minor}_x86_64" for minor in range(5, 37)), "linux_x86_64")


# Concurrent pips for the install from prefetched wheels: one per core, two at least (one unpacks while the other
# waits on the disk), four at most.
_INSTALLERS = min(4, max(2, os.cpu_count() or 1))


def _install_runtime(golden: Path, final: Path, progress: Progress, group: str, *, offline: bool) -> None:
    pip_env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": f"{RUNTIME_MOUNT}/{_WHEELHOUSE}"} if offline else {}
    groups = wheel_groups(final / _WHEELHOUSE, _INSTALLERS) if offline else None
    run_logged(
        nspawn_chroot_cmd(golden, binds={str(final): RUNTIME_MOUNT}, ro_binds=list(LOCAL_PIP_DIRS),
                          command=_runtime_script(groups), pip_env=pip_env),
        log=final.parent / f"{final.name}.build.log",
        progress=progress,
        label="pip install (prefetched wheels)" if offline else "pip install",
        every_s=20,
        preexec_fn=cgroup_joiner(group),
        timeout_s=3600,
    )


def prefetch_runtime_wheels(cache_dir: Path, progress: Progress) -> Path | None:
    """Download the runtime's wheels for the golden image's Python into a wheelhouse on this machine.

    It needs no golden image, so it runs while mmdebstrap builds one; None (and a progress line) when pip
    cannot, and the runtime build then downloads as before."""
    dest = cache_dir / f".tmp-wheels-{os.getpid()}"
    safe_rmtree(dest)
    platforms = [arg for p in _PLATFORMS for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "--no-input", "--only-binary=:all:", "--dest", str(dest),
           "--python-version", GOLDEN_PYTHON, "--implementation", "cp", *platforms, *RUNTIME_PACKAGES]
    start = time.monotonic()
    progress(f"downloading the Python runtime's wheels ({len(RUNTIME_PACKAGES)} requirements)")
    try:
        run_logged(cmd, log=cache_dir / "runtime-wheels.build.log", progress=progress, label="pip download",
                   every_s=20, timeout_s=3600)
    except SimError as exc:
        progress(f"prefetch failed, the runtime build will download instead: {str(exc).splitlines()[0]}")
        safe_rmtree(dest)
        return None
    progress(f"runtime wheels ready in {time.monotonic() - start:.0f} s")
    return dest


def labelled(progress: Progress, label: str) -> Progress:
    return lambda msg: progress(f"{label}: {msg}")


def golden_and_wheels(cache_dir: Path, progress: Progress) -> tuple[Path, Path | None]:
    """The golden image (built if missing) and, at the same time, the runtime's wheels prefetched (they do not
    depend on each other; only the install into the runtime needs the image's interpreter)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="pdfleet-sim-build") as pool:
        golden_job = pool.submit(ensure_golden, cache_dir, labelled(progress, "golden image"))
        wheels_job = pool.submit(prefetch_runtime_wheels, cache_dir, labelled(progress, "runtime wheels"))
        wheelhouse = wheels_job.result()
        try:
            golden = golden_job.result()
        except BaseException:
            if wheelhouse is not None:
                safe_rmtree(wheelhouse)
            raise
    return golden, wheelhouse


def ensure_images(cache_dir: Path, progress: Progress, with_runtime: bool) -> tuple[Path, Path | None]:
    """The golden image and (with_runtime) the runtime, each built if missing. When both are missing, the
    runtime's wheels download while mmdebstrap builds the image. Each part reports its own progress."""
    golden_final = golden_path(cache_dir)
    if not with_runtime:
        return ensure_golden(cache_dir, progress), None
    if golden_final.is_dir() or runtime_built(runtime_path(cache_dir, golden_final)):
        golden = ensure_golden(cache_dir, progress)
        return golden, ensure_runtime(golden, cache_dir, progress)
    golden, wheelhouse = golden_and_wheels(cache_dir, progress)
    return golden, ensure_runtime(golden, cache_dir, labelled(progress, "runtime"), wheelhouse=wheelhouse)


def golden_now_runtime_later(cache_dir: Path, progress: Progress) -> tuple[Path, Path]:
    """The golden image, built if missing, and the runtime's directory, which a background process builds into
    unless it is built (pdfleet_sim.build; the hosts bind the directory at once): :func:`ensure_runtime` waits
    for that build."""
    from . import build

    runtime = runtime_path(cache_dir, golden_path(cache_dir))
    build.start(cache_dir, progress)
    golden = ensure_golden(cache_dir, progress)
    runtime.mkdir(parents=True, exist_ok=True)
    return golden, runtime


def require_image_files(golden: Path) -> None:
    if not (golden / "etc/pdfleet-sim-image").is_file():
        raise SimError(f"{golden} is not a finished pdfleet golden image; delete it and run `pdfleet sim up`")


__all__ = [
    "GOLDEN_PACKAGES",
    "LOCAL_PIP_DIRS",
    "RUNTIME_MOUNT",
    "RUNTIME_PACKAGES",
    "SETUP_SCRIPT",
    "ensure_golden",
    "ensure_images",
    "ensure_runtime",
    "golden_and_wheels",
    "golden_now_runtime_later",
    "golden_path",
    "prefetch_runtime_wheels",
    "runtime_path",
]
