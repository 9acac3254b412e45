"""The golden root filesystem the simulated hosts boot from, and the heavy Python runtime venv.

Both are built once and cached outside the repository, keyed by a hash of their recipe, built in a
temporary directory next to the final one and renamed into place, so a crash never leaves half an image.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pdfleet.patch.runtime import BASE_REQUIREMENTS

from .hosttypes import Progress, SimError
from .system import cgroup_joiner, pid_alive, remove_cgroup, run, run_logged, safe_rmtree

SUITE = "bookworm"


def debian_mirror() -> str:
    """The Debian mirror this machine's apt already uses (debootstrap needs one; none is hard-coded)."""
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
    # Replace debootstrap's own sources.list, which would repeat the deb822 sources.
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


def golden_recipe() -> dict[str, object]:
    return {
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


def _runtime_script() -> str:
    pip = f"{RUNTIME_MOUNT}/bin/pip"
    check = "import torch, numpy, zmq; print('torch', torch.__version__)"
    return (
        f"set -eu; python3 -m venv {RUNTIME_MOUNT}; "
        f"{pip} install --no-input {' '.join(RUNTIME_PACKAGES)}; "
        f"{pip} freeze > {RUNTIME_MOUNT}/pdfleet-freeze.txt; "
        f'{RUNTIME_MOUNT}/bin/python -c "{check}"'
    )


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


def ensure_golden(cache_dir: Path, progress: Progress) -> Path:
    """Return the cached golden image, building it first if its recipe changed (~1 minute)."""
    recipe = golden_recipe()
    final = cache_dir / f"golden-{recipe_hash(recipe)}"
    if final.is_dir():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    _clean_stale_builds(cache_dir, progress)
    tmp = cache_dir / f".tmp-{final.name}-{os.getpid()}"
    start = time.monotonic()
    progress(f"building golden image {final.name} (debootstrap {SUITE}, about a minute)")
    try:
        tmp.mkdir()
        run_logged(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(GOLDEN_PACKAGES)}",
                SUITE,
                str(tmp),
                debian_mirror(),
            ],
            log=cache_dir / f"{final.name}.build.log",
            progress=progress,
            label="debootstrap",
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


def ensure_runtime(golden: Path, cache_dir: Path, progress: Progress, wheelhouse: Path | None = None) -> Path:
    """Return the cached heavy Python runtime venv, building it if needed (several minutes, ~6 GB).

    With `wheelhouse` (from :func:`prefetch_runtime_wheels`) pip installs from it alone, offline; should that
    fail, the build runs again from the package indexes. The recipe, hence the cache key, is the same."""
    from .system import prepare_nspawn_host

    recipe = runtime_recipe(golden)
    final = cache_dir / f"runtime-{recipe_hash(recipe)}"
    if final.is_dir():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    _clean_stale_builds(cache_dir, progress)
    prepare_nspawn_host()
    tmp = cache_dir / f".tmp-{final.name}-{os.getpid()}"
    start = time.monotonic()
    progress(f"building Python runtime {final.name}: {' '.join(RUNTIME_PACKAGES)} (several minutes)")
    group = f"_build-{os.getpid()}"
    try:
        tmp.mkdir()
        if wheelhouse is not None:
            # Inside the runtime's own bind mount, so the golden tree needs no extra mount point.
            wheelhouse.rename(tmp / _WHEELHOUSE)
            try:
                _install_runtime(golden, tmp, final, progress, group, offline=True)
            except SimError as exc:
                progress(f"installing from the prefetched wheels failed ({str(exc).splitlines()[0]}); "
                         "installing from the package indexes")
                safe_rmtree(tmp)
                tmp.mkdir()
                _install_runtime(golden, tmp, final, progress, group, offline=False)
            safe_rmtree(tmp / _WHEELHOUSE)
        else:
            _install_runtime(golden, tmp, final, progress, group, offline=False)
        _finish(tmp, final, recipe)
    except BaseException:
        safe_rmtree(tmp)
        raise
    finally:
        remove_cgroup(group)
    size = sum(f.stat().st_size for f in final.rglob("*") if f.is_file() and not f.is_symlink())
    progress(f"Python runtime ready in {time.monotonic() - start:.0f} s ({size / 2**30:.1f} GiB): {final}")
    return final


_WHEELHOUSE = ".pdfleet-wheelhouse"
# The golden image's interpreter (Debian bookworm's python3) and the wheel platforms its glibc 2.36 runs.
GOLDEN_PYTHON = "3.11"
_PLATFORMS = ("manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64",
              *(f"manylinux_2_{minor}_x86_64" for minor in range(5, 37)), "linux_x86_64")


def _install_runtime(golden: Path, tmp: Path, final: Path, progress: Progress, group: str, *, offline: bool) -> None:
    pip_env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": f"{RUNTIME_MOUNT}/{_WHEELHOUSE}"} if offline else {}
    run_logged(
        nspawn_chroot_cmd(golden, binds={str(tmp): RUNTIME_MOUNT}, ro_binds=list(LOCAL_PIP_DIRS),
                          command=_runtime_script(), pip_env=pip_env),
        log=final.parent / f"{final.name}.build.log",
        progress=progress,
        label="pip install (prefetched wheels)" if offline else "pip install",
        every_s=20,
        preexec_fn=cgroup_joiner(group),
        timeout_s=3600,
    )


def prefetch_runtime_wheels(cache_dir: Path, progress: Progress) -> Path | None:
    """Download the runtime's wheels for the golden image's Python into a wheelhouse on this machine.

    It needs no golden image, so it runs while debootstrap builds one; None (and a progress line) when pip
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


def _labelled(progress: Progress, label: str) -> Progress:
    return lambda msg: progress(f"{label}: {msg}")


def ensure_images(cache_dir: Path, progress: Progress, with_runtime: bool) -> tuple[Path, Path | None]:
    """The golden image and (with_runtime) the runtime, each built if missing. When both are missing, the
    runtime's wheels download while debootstrap builds the image (they do not depend on each other); only the
    install into the runtime needs the image's interpreter. Each part reports its own progress."""
    golden_final = golden_path(cache_dir)
    if not with_runtime:
        return ensure_golden(cache_dir, progress), None
    if golden_final.is_dir() or runtime_path(cache_dir, golden_final).is_dir():
        golden = ensure_golden(cache_dir, progress)
        return golden, ensure_runtime(golden, cache_dir, progress)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="pdfleet-sim-build") as pool:
        golden_job = pool.submit(ensure_golden, cache_dir, _labelled(progress, "golden image"))
        wheels_job = pool.submit(prefetch_runtime_wheels, cache_dir, _labelled(progress, "runtime wheels"))
        wheelhouse = wheels_job.result()
        try:
            golden = golden_job.result()
        except BaseException:
            if wheelhouse is not None:
                safe_rmtree(wheelhouse)
            raise
    return golden, ensure_runtime(golden, cache_dir, _labelled(progress, "runtime"), wheelhouse=wheelhouse)


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
    "golden_path",
    "prefetch_runtime_wheels",
    "runtime_path",
]
