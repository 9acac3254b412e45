"""The pdfleet wheel the simulated workers and the watchdog run from: built once on the control machine, cached by
content hash.

The wheel play of site.yml (ansible/playbooks/wheel.yml) calls ``python -m pdfleet.sim.wheel --json``; the sglang
role (sim hosts) and the pdfleet_watchdog role (the router host) copy the wheel and install it with
``pip --no-deps`` only when the installed wheel's sha256 differs. The cache key is
the sha256 of the package sources and pyproject.toml, so an unchanged tree never rebuilds (and a changed one
always does). Progress goes to stderr; exit 2 when the wheel cannot be built.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from pdfleet.paths import REPO_ROOT

PACKAGE_DIR = REPO_ROOT / "scripts" / "pdfleet"
DEFAULT_CACHE = REPO_ROOT / ".cache" / "pdfleet-wheels"
SOURCE_SUFFIXES = (".py", ".yml", ".typed")
# pdfleet.testing holds helpers for tests and benchmarks: never shipped to the hosts.
NOT_SHIPPED = "testing"


class WheelError(Exception):
    """The wheel could not be built; the message names the command and its output."""


@dataclass(frozen=True)
class Wheel:
    path: str
    sha256: str
    source_hash: str
    built: bool


def source_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    return sorted(p for p in package_dir.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES
                  and "__pycache__" not in p.parts and p.relative_to(package_dir).parts[0] != NOT_SHIPPED)


def source_hash(package_dir: Path = PACKAGE_DIR, pyproject: Path = REPO_ROOT / "pyproject.toml") -> str:
    """sha256 over every source file's path and bytes, and pyproject.toml (first 16 hex digits)."""
    h = hashlib.sha256()
    for path in [*source_files(package_dir), pyproject]:
        rel = path.relative_to(package_dir.parent) if path != pyproject else Path(pyproject.name)
        h.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _progress(msg: str) -> None:
    print(f"[pdfleet wheel] {msg}", file=sys.stderr, flush=True)


def ensure_wheel(cache_dir: Path = DEFAULT_CACHE, repo: Path = REPO_ROOT) -> Wheel:
    """The cached wheel of this source tree, built with `pip wheel --no-deps` when missing."""
    key = source_hash(repo / "scripts" / "pdfleet", repo / "pyproject.toml")
    final = cache_dir / key
    found = sorted(final.glob("pdfleet-*.whl")) if final.is_dir() else []
    if found:
        return Wheel(str(found[0]), _sha256(found[0]), key, built=False)
    cache_dir.mkdir(parents=True, exist_ok=True)
    _progress(f"building the pdfleet wheel for sources {key}")
    with tempfile.TemporaryDirectory(prefix=".build-", dir=cache_dir) as tmp:
        src = Path(tmp) / "src"
        # A copy of what the build reads, so the build leaves nothing (build/, *.egg-info) in the repository.
        shutil.copytree(repo / "scripts" / "pdfleet", src / "scripts" / "pdfleet",
                        ignore=lambda d, names: [n for n in names if n == "__pycache__"
                                                 or (Path(d) == repo / "scripts" / "pdfleet" and n == NOT_SHIPPED)])
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(repo / name, src / name)
        out = Path(tmp) / "out"
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-input", "--quiet",
                               "--wheel-dir", str(out), str(src)],
                              capture_output=True, text=True, timeout=600, check=False)
        wheels = sorted(out.glob("pdfleet-*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            raise WheelError(f"pip wheel {src} failed (rc {proc.returncode}): {(proc.stdout + proc.stderr)[-1500:]}")
        staged = Path(tmp) / key
        staged.mkdir()
        wheel = staged / wheels[0].name
        shutil.move(wheels[0], wheel)
        try:
            os.rename(staged, final)
        except OSError:
            if not final.is_dir():  # not another builder's finished copy: a real failure
                raise
    found = sorted(final.glob("pdfleet-*.whl"))
    _progress(f"built {found[0]}")
    return Wheel(str(found[0]), _sha256(found[0]), key, built=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdfleet.sim.wheel", description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help=f"default {DEFAULT_CACHE}")
    parser.add_argument("--json", action="store_true", help="print path, sha256, source_hash, built as JSON")
    args = parser.parse_args(argv)
    try:
        wheel = ensure_wheel(args.cache_dir)
    except (WheelError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"pdfleet wheel: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(wheel)) if args.json else wheel.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
