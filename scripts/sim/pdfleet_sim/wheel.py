"""The two wheels the simulated hosts run from: the production ``pdfleet`` wheel and the ``pdfleet-sim`` wheel (the
stand-in workers, pdfleet_sim.worker), each built once on the control machine and cached by its source hash.

The wheel play of site.yml (ansible/playbooks/wheel.yml) calls ``python -m pdfleet_sim.wheel --json``, which prints
``{"pdfleet": {...}, "pdfleet-sim": {...}}`` (each: path, sha256, source_hash, built). The sglang role (sim hosts,
``sglang_sim_wheels``) installs both; the pdfleet_watchdog role (the router host, ``pdfleet_watchdog_wheel``) only
the production one. Each role copies and installs with ``pip --no-deps`` only when the installed wheels' sha256s
differ. A wheel's cache key is the sha256 of its package sources and its pyproject.toml, so an unchanged tree
never rebuilds (and a changed one always does). Progress goes to stderr; exit 2 when a wheel cannot be built.
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

DEFAULT_CACHE = REPO_ROOT / ".cache" / "pdfleet-wheels"
SOURCE_SUFFIXES = (".py", ".yml", ".typed")


class WheelError(Exception):
    """A wheel could not be built; the message names the command and its output."""


@dataclass(frozen=True)
class Wheel:
    path: str
    sha256: str
    source_hash: str
    built: bool


@dataclass(frozen=True)
class Project:
    """One distribution of the checkout: its project directory (pyproject.toml) and its import package in it."""

    dist: str  # the distribution name, as in pyproject.toml
    project: str  # the project directory, relative to the checkout
    package: str  # the import package's directory, relative to the project directory
    extra: tuple[str, ...] = ()  # other files the build reads, relative to the project directory

    @property
    def wheel_glob(self) -> str:
        return self.dist.replace("-", "_") + "-*.whl"


PROJECTS = (
    Project("pdfleet", ".", "scripts/pdfleet", extra=("README.md",)),
    Project("pdfleet-sim", "scripts/sim", "pdfleet_sim"),
)


def source_files(package_dir: Path) -> list[Path]:
    return sorted(p for p in package_dir.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES
                  and "__pycache__" not in p.parts)


def source_hash(package_dir: Path, pyproject: Path) -> str:
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


def ensure_wheel(project: Project, cache_dir: Path = DEFAULT_CACHE, repo: Path = REPO_ROOT) -> Wheel:
    """The cached wheel of one project's source tree, built with `pip wheel --no-deps` when missing."""
    root = repo / project.project
    key = source_hash(root / project.package, root / "pyproject.toml")
    final = cache_dir / f"{project.dist}-{key}"
    found = sorted(final.glob(project.wheel_glob)) if final.is_dir() else []
    if found:
        return Wheel(str(found[0]), _sha256(found[0]), key, built=False)
    cache_dir.mkdir(parents=True, exist_ok=True)
    _progress(f"building the {project.dist} wheel for sources {key}")
    with tempfile.TemporaryDirectory(prefix=".build-", dir=cache_dir) as tmp:
        src = Path(tmp) / "src"
        # A copy of what the build reads, so the build leaves nothing (build/, *.egg-info) in the repository.
        shutil.copytree(root / project.package, src / project.package,
                        ignore=lambda _d, names: [n for n in names if n == "__pycache__" or n.endswith(".egg-info")])
        for name in ("pyproject.toml", *project.extra):
            shutil.copy2(root / name, src / name)
        out = Path(tmp) / "out"
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-input", "--quiet",
                               "--wheel-dir", str(out), str(src)],
                              capture_output=True, text=True, timeout=600, check=False)
        wheels = sorted(out.glob(project.wheel_glob))
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
    found = sorted(final.glob(project.wheel_glob))
    _progress(f"built {found[0]}")
    return Wheel(str(found[0]), _sha256(found[0]), key, built=True)


def ensure_wheels(cache_dir: Path = DEFAULT_CACHE, repo: Path = REPO_ROOT) -> dict[str, Wheel]:
    """{distribution: its cached wheel} for pdfleet and pdfleet-sim, in that order."""
    return {p.dist: ensure_wheel(p, cache_dir, repo) for p in PROJECTS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdfleet_sim.wheel", description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help=f"default {DEFAULT_CACHE}")
    parser.add_argument("--json", action="store_true",
                        help="print {distribution: {path, sha256, source_hash, built}} as JSON")
    args = parser.parse_args(argv)
    try:
        wheels = ensure_wheels(args.cache_dir)
    except (WheelError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"pdfleet wheel: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({dist: asdict(w) for dist, w in wheels.items()}) if args.json
          else "\n".join(w.path for w in wheels.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
