"""The heavy CPU runtime that can import SGLang's real NIXL conn module (no GPU, no NIXL needed).

Layout under ``root`` (default ``<repo>/.cache/runtime``, or ``$PDFLEET_RUNTIME_DIR``)::

    base/                          a venv: CUDA torch 2.14.1 + torchvision 0.29.1 + common deps (~6 GB)
    overlay-<version>/             pip --target: sglang==<version> (--no-deps) + its transformers pin …
    conn-<version>/pristine/conn.py   the wheel's sglang/srt/disaggregation/nixl/conn.py
    conn-<version>/patched/conn.py    the same with pdfleet's patch applied (pdfleet.patch.apply)

Run code with ``base/bin/python`` and ``PYTHONPATH=overlay-<version>``, and load the pristine or patched
conn.py with ``pdfleet.patch.nixlcpu.load_conn_module``. Each part holds a ``.pdfleet-recipe`` stamp with the
hash of the recipe that built it: :func:`ensure_runtime` rebuilds a part only when its recipe changed
(or a build was interrupted) and otherwise returns at once. Progress goes to stderr.

Build from the command line: ``python -m pdfleet.patch.runtime [--root DIR] [VERSION ...]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pdfleet.errors import PdfleetError
from pdfleet.patch import manifest as patches
from pdfleet.patch.apply import apply_to_copy, extract_from_wheel, sha256_file
from pdfleet.patch.cpu_requirements import BASE_REQUIREMENTS  # the one list, re-exported
from pdfleet.patch.errors import UnsupportedVersionError
from pdfleet.paths import REPO_ROOT
from pdfleet.versions import OVERLAY_REQUIREMENTS, PINS

STAMP = ".pdfleet-recipe"
PYTHON_TAG = (3, 11)  # the sglang wheels are cp311

# The pinned router, for its own argument parser (pdfleet.launchcheck): installed with --no-deps into
# router-<version>/ (its router_args module needs nothing else). $PDFLEET_RUNTIME_ROUTER_DIR overrides where.
ROUTER_REQUIREMENT = f"{PINS['sglang_router_package']}=={PINS['sglang_router_version']}"

# Installed with --no-deps into overlay-<version>, after sglang==<version> itself: OVERLAY_REQUIREMENTS
# (constants.yml, shared with the sglang role, which installs the same list into each sim host's service venv).


class RuntimeBuildError(PdfleetError):
    """The runtime could not be built; the message says what to do (exit code 2)."""


def _log(msg: str) -> None:
    print(f"[pdfleet runtime] {msg}", file=sys.stderr, flush=True)


def default_root() -> Path:
    env = os.environ.get("PDFLEET_RUNTIME_DIR")
    return Path(env) if env else REPO_ROOT / ".cache" / "runtime"


def default_wheel_cache() -> Path:
    return REPO_ROOT / ".cache" / "wheels"


def _hash(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _stamp_ok(folder: Path, recipe_hash: str) -> bool:
    stamp = folder / STAMP
    return stamp.is_file() and stamp.read_text().strip() == recipe_hash


def _run(cmd: Sequence[str], what: str) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise RuntimeBuildError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def _pip(python: Path) -> list[str]:
    return [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]


def _find_wheel(cache: Path, version: str) -> Path | None:
    found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    return found[0] if found else None


def sglang_wheel(version: str, cache: Path | None = None, python: str | None = None) -> Path:
    """The cached ``sglang==version`` wheel, downloaded (``pip download --no-deps``) when missing."""
    cache = cache or default_wheel_cache()
    wheel = _find_wheel(cache, version)
    if wheel is not None:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    _log(f"downloading the sglang=={version} wheel into {cache}")
    _run([python or sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
          "-d", str(cache), f"sglang=={version}"], f"downloading sglang=={version}")
    wheel = _find_wheel(cache, version)
    if wheel is None:
        raise RuntimeBuildError(f"pip downloaded no sglang-{version}-*.whl into {cache}")
    return wheel


def pure_wheel(project: str, version: str, cache: Path | None = None, python: str | None = None) -> Path:
    """The cached ``project==version`` py3-none-any wheel (e.g. flashinfer_python, read by
    pdfleet.patch.hwprobe), downloaded (``pip download --no-deps``) when missing."""
    cache = cache or default_wheel_cache()
    stem = project.replace("-", "_")
    pattern = f"{stem}-{version}-py3-none-any.whl"
    found = sorted(cache.glob(pattern))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    _log(f"downloading the {project}=={version} wheel into {cache}")
    _run([python or sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
          "--disable-pip-version-check", "-d", str(cache), f"{project}=={version}"],
         f"downloading {project}=={version}")
    found = sorted(cache.glob(pattern))
    if not found:
        raise RuntimeBuildError(f"pip downloaded no {pattern} into {cache}")
    return found[0]


@dataclass(frozen=True)
class Runtime:
    """Paths of a built runtime (see the module docstring for the layout)."""

    root: Path

    @property
    def base(self) -> Path:
        return self.root / "base"

    @property
    def python(self) -> Path:
        return self.base / "bin" / "python"

    def overlay(self, version: str) -> Path:
        return self.root / f"overlay-{version}"

    def conn_file(self, version: str, patched: bool) -> Path:
        return self.root / f"conn-{version}" / ("patched" if patched else "pristine") / "conn.py"

    def env(self, version: str) -> dict[str, str]:
        """Environment for ``self.python``: the overlay and pdfleet's own package on PYTHONPATH."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.overlay(version)), str(REPO_ROOT / "scripts")])
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
        return env

    @property
    def router(self) -> Path:
        env = os.environ.get("PDFLEET_RUNTIME_ROUTER_DIR")
        return Path(env) if env else self.root / f"router-{PINS['sglang_router_version']}"

    def is_ready(self, version: str) -> bool:
        return (
            _stamp_ok(self.base, _base_hash())
            and (self.overlay(version) / STAMP).is_file()
            and (self.router / STAMP).is_file()
            and self.conn_file(version, True).is_file()
        )


def _base_hash() -> str:
    return _hash({"python": list(PYTHON_TAG), "requirements": list(BASE_REQUIREMENTS)})


def _build_base(rt: Runtime) -> None:
    recipe = _base_hash()
    if _stamp_ok(rt.base, recipe):
        _log(f"base venv up to date: {rt.base}")
        return
    if sys.version_info[:2] != PYTHON_TAG:
        raise RuntimeBuildError(
            f"the SGLang wheels are cp311: run this with Python 3.11 (this is {sys.version.split()[0]})"
        )
    if rt.base.exists():
        _log(f"base venv recipe changed or build incomplete: removing {rt.base}")
        shutil.rmtree(rt.base)
    started = time.monotonic()
    _log(f"creating base venv {rt.base}")
    base_python = Path(getattr(sys, "_base_executable", sys.executable))
    _run([str(base_python), "-m", "venv", str(rt.base)], "creating the base venv")
    _log(f"installing {len(BASE_REQUIREMENTS)} packages (CUDA torch {BASE_REQUIREMENTS[0]}, ~5.5 GB): "
         "a few minutes")
    _run([*_pip(rt.python), "install", "--quiet", *BASE_REQUIREMENTS], "installing the base requirements")
    (rt.base / STAMP).write_text(recipe + "\n")
    _log(f"base venv ready in {time.monotonic() - started:.0f}s")


def _build_overlay(rt: Runtime, version: str, wheel: Path) -> None:
    extra = OVERLAY_REQUIREMENTS[version]
    recipe = _hash({"wheel": sha256_file(wheel), "extra": list(extra), "base": _base_hash()})
    target = rt.overlay(version)
    if _stamp_ok(target, recipe):
        _log(f"overlay {version} up to date: {target}")
        return
    if target.exists():
        shutil.rmtree(target)
    _log(f"installing sglang=={version} + {', '.join(extra)} into {target} (--no-deps)")
    started = time.monotonic()
    _run([*_pip(rt.python), "install", "--quiet", "--no-deps", "--no-compile", "--target", str(target),
          str(wheel), *extra], f"installing the {version} overlay")
    (target / STAMP).write_text(recipe + "\n")
    _log(f"overlay {version} ready in {time.monotonic() - started:.0f}s")


def _build_router(rt: Runtime) -> None:
    recipe = _hash({"router": ROUTER_REQUIREMENT, "base": _base_hash()})
    if _stamp_ok(rt.router, recipe):
        return
    if rt.router.exists():
        shutil.rmtree(rt.router)
    _log(f"installing {ROUTER_REQUIREMENT} into {rt.router} (--no-deps)")
    _run([*_pip(rt.python), "install", "--quiet", "--no-deps", "--no-compile", "--target", str(rt.router),
          ROUTER_REQUIREMENT], f"installing {ROUTER_REQUIREMENT}")
    (rt.router / STAMP).write_text(recipe + "\n")


def _build_conn_copies(rt: Runtime, version: str, wheel: Path) -> None:
    manifest = patches.load_manifest(version)
    pristine, patched = rt.conn_file(version, False), rt.conn_file(version, True)
    if (
        pristine.is_file() and patched.is_file()
        and sha256_file(pristine) == manifest.pristine_sha256
        and sha256_file(patched) == manifest.patched_sha256
    ):
        return
    _log(f"writing pristine and patched ({manifest.patch_id}) conn.py for {version}")
    extract_from_wheel(wheel, manifest.file, pristine)
    apply_to_copy(version, pristine, patched)


def ensure_runtime(
    versions: Sequence[str] | None = None, root: Path | None = None, wheel_cache: Path | None = None
) -> Runtime:
    """Build (or reuse) the base venv, and the overlay and conn copies of each version (default: all).

    Raises UnsupportedVersionError for a version without a patch, RuntimeBuildError when a
    step fails (with the tool's last output lines).
    """
    known = patches.supported_versions()
    wanted = list(versions) if versions else known
    for v in wanted:
        if v not in OVERLAY_REQUIREMENTS or v not in known:
            raise UnsupportedVersionError(v, [k for k in known if k in OVERLAY_REQUIREMENTS])
    rt = Runtime(Path(root) if root else default_root())
    rt.root.mkdir(parents=True, exist_ok=True)
    _build_base(rt)
    _build_router(rt)
    for v in wanted:
        wheel = sglang_wheel(v, wheel_cache, str(rt.python))
        _build_overlay(rt, v, wheel)
        _build_conn_copies(rt, v, wheel)
    return rt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdfleet.patch.runtime", description=__doc__.split("\n")[0])
    parser.add_argument("versions", nargs="*", help="SGLang versions (default: every patched version)")
    parser.add_argument("--root", type=Path, default=None, help="runtime folder (default: %(default)s)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        rt = ensure_runtime(args.versions, args.root)
    except PdfleetError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    _log(f"runtime ready at {rt.root} ({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
