"""The wheel facts against the package registry, read with pip through its ordinary configuration.

* Every pinned package's wheel file names, as pip lists them (nothing downloaded), give the Pythons and glibc
  floor the manifests' `wheels:` and constants.yml `pin_wheels` record (default suite: one look-up each).
* The sglang wheel of each service venv lock (the sglang role's files/service/sglang-<version>.lock) downloads
  with pip --require-hashes, and with its hashes one digit off pip refuses it (default suite).
* Long: pip's resolver takes the whole `pypi` stack (the pinned sglang, the router, the overlay requirements of
  constants.yml, and NIXL) for each supported distribution's Python and glibc, installing nothing
  (`pip install --dry-run --report`), and agrees with the decision of pdfleet.patch.wheels: where it says the pin
  installs, pip resolves it; where it refuses, pip fails too. Each resolution prints its time and the bytes pip
  fetched (its cache directory, fresh per test session).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pdfleet.patch import manifest as patches
from pdfleet.patch.wheels import host_problems, load_pin_wheels, registry_wheels, summarize
from pdfleet.versions import CONSTANTS, OVERLAY_REQUIREMENTS, PINS
from pdfleet_sim.image import GOLDEN_PYTHON

DISTRIBUTIONS: dict[str, dict[str, str]] = CONSTANTS["distribution_pythons"]


def _releases() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(name, version, pythons, glibc) of every package of every pin, each once."""
    seen = {}
    for version in patches.supported_versions():
        for p in load_pin_wheels(version).packages:
            seen[(p.name, p.version)] = (p.name, p.version, p.pythons, p.glibc)
    return list(seen.values())


@pytest.mark.parametrize(("name", "version", "pythons", "glibc"), _releases(),
                         ids=[f"{r[0]}=={r[1]}" for r in _releases()])
def test_the_registry_has_the_wheels_the_facts_record(name: str, version: str, pythons: tuple[str, ...],
                                                       glibc: str) -> None:
    found = summarize(name, version, registry_wheels(name, version))
    assert (found.pythons, found.glibc) == (pythons, glibc), (
        f"{name}=={version}: the registry's wheels give Pythons {found.pythons}, glibc {found.glibc!r}; the facts "
        f"say {pythons}, {glibc!r}: update them (python -m pdfleet.patch.wheels {name}=={version})")


def _platforms(glibc: str) -> list[str]:
    """pip's --platform values for a host with this glibc: every manylinux floor up to it."""
    top = int(glibc.split(".")[1])
    plats = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"]
    plats += [f"manylinux_2_{minor}_x86_64" for minor in range(5, top + 1)]
    return [arg for p in plats for arg in ("--platform", p)]


_UNITS = {"kB": 10**3, "MB": 10**6, "GB": 10**9, "bytes": 1}


def _fetched(out: str) -> tuple[int, int]:
    """(bytes pip downloaded, bytes it read from local wheel directories) while resolving, from its log."""
    remote = sum(float(m[1]) * _UNITS[m[2]] for m in re.finditer(r"^\s*Downloading \S+ \(([\d.]+) (kB|MB|GB|bytes)\)",
                                                                 out, re.MULTILINE))
    local = sum(Path(m[1]).stat().st_size for m in re.finditer(r"^Processing (/\S+\.whl)", out, re.MULTILINE)
                if Path(m[1]).is_file())
    return int(remote), local


def _resolve(requirements: list[str], python: str, glibc: str, work: Path) -> tuple[int, str, dict]:
    report = work / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--report", str(report),
         "--progress-bar", "off", "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
         *_platforms(glibc), "--target", str(work / "target"), *requirements],
        capture_output=True, text=True, timeout=3000, check=False)
    data = json.loads(report.read_text()) if proc.returncode == 0 and report.is_file() else {}
    return proc.returncode, proc.stdout + proc.stderr, data


@pytest.mark.long
@pytest.mark.parametrize("version", patches.supported_versions())
@pytest.mark.parametrize("distribution", sorted(DISTRIBUTIONS))
def test_the_pypi_stack_resolves_where_the_facts_say_it_installs(distribution: str, version: str,
                                                                  tmp_path: Path) -> None:
    look = DISTRIBUTIONS[distribution]
    router = f"{PINS['sglang_router_package']}=={PINS['sglang_router_version']}"
    stacks = {  # what the sglang role installs in pypi mode; and with what the nixl role installs too
        "sglang role": ([f"sglang=={version}", router], False),
        "with NIXL": ([f"sglang=={version}", router, f"nixl=={PINS['nixl_version']}"], True),
    }
    for label, (requirements, with_nixl) in stacks.items():
        problems = host_problems(distribution, look, version, "pypi", with_nixl=with_nixl)
        t0 = time.monotonic()
        rc, out, report = _resolve(requirements, look["python"], look["glibc"], tmp_path)
        remote, local = _fetched(out)
        print(f"\n{distribution} (Python {look['python']}, glibc {look['glibc']}) sglang {version} [{label}]: "
              f"rc {rc} in {time.monotonic() - t0:.0f} s, {remote / 2**20:.0f} MiB downloaded and {local / 2**20:.0f} "
              f"MiB read from local wheel directories, {len(report.get('install', []))} distributions",
              file=sys.stderr)
        if problems:
            assert rc != 0, f"the facts refuse {distribution} for {version} ({problems}) but pip resolved it"
            named = set(re.findall(r"([A-Za-z0-9_.-]+)==\S+ (?:has|needs)", problems[0]))
            assert any(n.replace("-", "_") in out.replace("-", "_") for n in named), (problems, out[-3000:])
        else:
            assert rc == 0, f"the facts say {distribution} installs {version} but pip did not:\n{out[-4000:]}"
            installed = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}
            assert installed["sglang"] == version
            for p in load_pin_wheels(version).packages:
                if p.name in installed:
                    assert installed[p.name] == p.version, (p, installed[p.name])


@pytest.mark.long
@pytest.mark.parametrize("version", [
    pytest.param("0.5.15.post1"),
    pytest.param("0.5.23"),  # found by this test: the overlay installed tokenizers 0.23.3 where the wheel pins 0.23.2
])
def test_the_overlay_requirements_install_with_the_pin(version: str, tmp_path: Path) -> None:
    """The sim runtime installs the overlays with --no-deps on the golden image's Python: only a resolution shows
    whether they agree with the pinned wheel's own requirements."""
    look = DISTRIBUTIONS["debian-bookworm"]
    assert look["python"] == GOLDEN_PYTHON
    rc, out, _ = _resolve([f"sglang=={version}", *OVERLAY_REQUIREMENTS[version]], look["python"], look["glibc"],
                          tmp_path)
    assert rc == 0, "\n".join(line for line in out.splitlines() if "ERROR" in line or "requires" in line)[-3000:]


def _lock_block(text: str, name: str) -> str:
    """The requirement of ``name`` in a hash lock, with its hash lines, as the lock writes it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}=="))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end]) + "\n"


@pytest.mark.parametrize("version", patches.supported_versions())
def test_the_service_locks_hashes_are_the_registrys_files_and_pip_refuses_another(version: str,
                                                                                   tmp_path: Path) -> None:
    """The sglang wheel of each service lock (files/service/sglang-<version>.lock), downloaded the way the role
    installs it (pip --require-hashes, through this machine's pip configuration): the lock's hash is the file the
    registry serves, and one digit off is refused."""
    from pdfleet.paths import REPO_ROOT

    lock = REPO_ROOT / "ansible" / "roles" / "sglang" / "files" / "service" / f"sglang-{version}.lock"
    block = _lock_block(lock.read_text(), "sglang")
    assert block.startswith(f"sglang=={version}") and "--hash=sha256:" in block, block

    def download(requirement: str, dest: Path) -> subprocess.CompletedProcess[str]:
        req = tmp_path / f"{dest.name}.txt"
        req.write_text(requirement)
        return subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
                               "--only-binary=:all:", "--python-version", GOLDEN_PYTHON, "--implementation", "cp",
                               *_platforms("2.36"), "--progress-bar", "off", "-d", str(dest), "-r", str(req)],
                              capture_output=True, text=True, timeout=600, check=False)

    ok = download(block, tmp_path / "ok")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    assert [p.name for p in (tmp_path / "ok").glob("sglang-*.whl")], list((tmp_path / "ok").iterdir())
    # each hash of the block (one per wheel: a Python-specific release has several) one digit off
    flipped = re.sub(r"(--hash=sha256:[0-9a-f]{63})([0-9a-f])", lambda m: m[1] + ("0" if m[2] != "0" else "1"), block)
    bad = download(flipped, tmp_path / "bad")
    assert bad.returncode != 0 and "DO NOT MATCH THE HASHES" in bad.stdout + bad.stderr, bad.stderr[-2000:]
