"""Which host Pythons and glibc can install a pin: the per-pin wheel facts and the decision from them.

The facts were read from the package registry with pip itself (``registry_wheels``: the wheel file names pip
lists for one release) and are kept beside the pins they describe:

* a SGLang pin's own wheels (sglang, sglang-kernel, torch: the versions that sglang wheel requires) in the
  ``wheels:`` section of its manifest, ``scripts/pdfleet/patches/<version>/manifest.yml``;
* the pins shared by every SGLang pin (NIXL and its CUDA backends, the router) in ``constants.yml``
  (``pin_wheels``), next to ``pins`` themselves.

A pin installs on a host when every package of it has a wheel for the host's Python (``pythons``) and the host's
glibc is at least the wheel's manylinux floor (``glibc``). ``host_problems`` is the decision the sglang role's
check and the provision play's refusal use (through the ``pdfleet_python_problems`` filter); it names the host,
its Python, the pin, what is missing and the pins that would install there.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from pdfleet.patch.errors import PatchError
from pdfleet.patch.manifest import MANIFEST_FILE, default_patches_dir, supported_versions
from pdfleet.versions import CONSTANTS, PINS, version_tuple

# A wheel file name: name-version(-build)?-python-abi-platform.whl (PEP 427); tags may be dotted sets.
_WHEEL_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")
_MANYLINUX_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_LINK_RE = re.compile(r"(?:Found link|Skipping link: .*?:) (\S+?\.whl)\b")


@dataclass(frozen=True)
class PackageWheels:
    """The x86-64 Linux wheels of one pinned release: the CPython minor versions and the glibc floor."""

    name: str
    version: str
    pythons: tuple[str, ...]  # "3.11", ...; "any" for a pure-Python or abi3 wheel family
    glibc: str  # "2.34": the lowest manylinux floor among its x86-64 wheels ("" for a pure-Python wheel)


@dataclass(frozen=True)
class PinWheels:
    """Every package one SGLang pin installs from the registry, and what that means for a host."""

    sglang_version: str
    packages: tuple[PackageWheels, ...]

    @property
    def pythons(self) -> tuple[str, ...]:
        """The Python minor versions every package has a wheel for (oldest first)."""
        sets = [set(p.pythons) for p in self.packages if "any" not in p.pythons]
        common = set.intersection(*sets) if sets else set()
        return tuple(sorted(common, key=version_tuple))

    @property
    def glibc(self) -> str:
        """The highest glibc floor among the packages: the host's glibc must be at least this."""
        floors = [p.glibc for p in self.packages if p.glibc]
        return max(floors, key=version_tuple) if floors else ""

    def missing(self, python: str, glibc: str) -> list[str]:
        """What stops this pin on a host with ``python`` ("3.10") and ``glibc`` ("2.35"); empty: it installs."""
        out = []
        for p in self.packages:
            if not p.pythons:
                out.append(f"{p.name}=={p.version} has no wheel on the package registry")
            elif "any" not in p.pythons and python not in p.pythons:
                out.append(f"{p.name}=={p.version} has wheels for Python {', '.join(p.pythons)} only")
            elif glibc and p.glibc and version_tuple(glibc) < version_tuple(p.glibc):
                out.append(f"{p.name}=={p.version} needs glibc >= {p.glibc} (manylinux_{p.glibc.replace('.', '_')})")
        return out

    def only(self, names: set[str]) -> PinWheels:
        """The same pin restricted to the packages ``names`` (what one install mode takes from the registry)."""
        return PinWheels(self.sglang_version, tuple(p for p in self.packages if p.name in names))


def _packages(entries: object, where: str) -> list[PackageWheels]:
    if not isinstance(entries, dict):
        raise PatchError(f"{where}: expected a mapping of package name -> {{version, pythons, glibc}}")
    out = []
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not {"version", "pythons", "glibc"} <= set(entry):
            raise PatchError(f"{where}: {name} needs version, pythons and glibc (see pdfleet.patch.wheels)")
        out.append(PackageWheels(str(name), str(entry["version"]), tuple(str(p) for p in entry["pythons"]),
                                 str(entry["glibc"] or "")))
    return out


def shared_wheels() -> list[PackageWheels]:
    """The wheels of the pins every SGLang pin shares (constants.yml: pin_wheels), checked against ``pins``."""
    packages = _packages(CONSTANTS.get("pin_wheels"), "scripts/pdfleet/constants.yml pin_wheels")
    expected = {"nixl": str(PINS["nixl_version"]), PINS["sglang_router_package"]: str(PINS["sglang_router_version"])}
    for pkg in packages:
        pin = expected.get(pkg.name, expected["nixl"] if pkg.name.startswith("nixl-") else None)
        if pin is not None and pkg.version != pin:
            raise PatchError(f"scripts/pdfleet/constants.yml: pin_wheels.{pkg.name} is {pkg.version} but the pin is "
                             f"{pin}; read the new release's wheels (python -m pdfleet.patch.wheels) and update it")
    return packages


def load_pin_wheels(version: str, patches_dir: Path | None = None) -> PinWheels:
    """The wheel facts of SGLang ``version``: its manifest's ``wheels:`` plus the shared pins'."""
    path = (patches_dir or default_patches_dir()) / version / MANIFEST_FILE
    if not path.is_file():
        raise PatchError(f"SGLang {version} has no manifest ({path}); supported: {', '.join(supported_versions())}")
    data = yaml.safe_load(path.read_text()) or {}
    own = _packages(data.get("wheels"), f"{path} wheels")
    if not any(p.name == "sglang" and p.version == version for p in own):
        raise PatchError(f"{path}: wheels must list sglang {version} itself")
    return PinWheels(version, tuple(own + shared_wheels()))


def scope(pin: PinWheels, install_mode: str, with_nixl: bool) -> PinWheels:
    """What a host installs from the registry: ``pypi`` the pin's packages and the router (NIXL's too when the nixl
    role installs from the registry), ``sim`` the sglang wheel itself (--no-deps, on the CPU runtime) and the
    router."""
    router = str(PINS["sglang_router_package"])
    own = {p.name for p in pin.packages if p.name != router and not p.name.startswith("nixl")}
    names = ({*own, router} if install_mode == "pypi" else {"sglang", router})
    if with_nixl:
        names |= {p.name for p in pin.packages if p.name.startswith("nixl")}
    return pin.only(names)


def host_problems(host: str, look: dict[str, str], version: str, install_mode: str, *, with_nixl: bool = False,
                  patches_dir: Path | None = None) -> list[str]:
    """Why ``host`` cannot install SGLang ``version``: [] when it can.

    ``look`` is what the sglang role's probe reports: ``python`` ("3.10", the interpreter that makes or made the
    service venv), ``python_from`` (which one that is), ``glibc`` ("2.35") and, in sim mode, ``runtime_python``
    (the prepared CPU runtime's). The one message names the host, its Python and glibc, the pin, each package
    without a fitting wheel and the pins that would install there."""
    python, glibc = look.get("python", ""), look.get("glibc", "")
    where = look.get("python_from") or "sglang_python"
    if not python:
        return [f"{host}: could not tell the Python version of {where} ({look.get('python_error', 'no answer')}); "
                "point sglang_python at the host's CPython 3 that makes the service venv."]

    def stops(v: str) -> list[str]:
        out = scope(load_pin_wheels(v, patches_dir), install_mode, with_nixl).missing(python, glibc)
        runtime = look.get("runtime_python", "")
        if install_mode == "sim" and runtime and runtime != python:
            out.append(f"the prepared CPU runtime (sglang_runtime_path) is built for Python {runtime}")
        return out

    missing = stops(version)
    if not missing:
        return []
    versions = supported_versions(patches_dir)
    others = [v for v in versions if v != version and not stops(v)]
    fix = (f"Pins that would install there: {', '.join(others)} (pdfleet_cluster.sglang.version)" if others
           else "No supported pin installs there")
    pythons = "; ".join(
        f"{v}: Python {', '.join(scope(load_pin_wheels(v, patches_dir), install_mode, with_nixl).pythons) or 'none'}"
        for v in versions)
    return [f"{host}: Python {python} ({where}, glibc {glibc or 'unknown'}) cannot install SGLang {version} "
            f"({install_mode} mode): {'; '.join(missing)}. {fix}; the pins' Pythons: {pythons}. Fix: pin a version "
            "that installs, or point sglang_python and nixl_python at a CPython the pin supports."]


def wheel_tags(filename: str) -> tuple[set[str], str] | None:
    """(CPython minor versions, manylinux glibc floor) of an x86-64 Linux or pure-Python wheel; None otherwise."""
    m = _WHEEL_RE.match(filename)
    if m is None:
        return None
    plats = m["plat"].split(".")
    if plats != ["any"] and not any(p.endswith("x86_64") and p.startswith("manylinux") for p in plats):
        return None
    floors = []
    for plat in plats:
        legacy = _MANYLINUX_LEGACY.get(plat.removesuffix("_x86_64"))
        found = re.match(r"manylinux_(\d+)_(\d+)_x86_64$", plat)
        if legacy or found:
            floors.append(legacy or (int(found[1]), int(found[2])))  # type: ignore[index]
    pythons: set[str] = set()
    for tag in m["py"].split("."):
        cp = re.match(r"cp3(\d+)$", tag)
        if m["abi"] in ("abi3", "none") or cp is None:
            pythons.add("any")  # pure Python or the stable ABI: any CPython 3 the wheel's Requires-Python allows
        else:
            pythons.add(f"3.{cp[1]}")
    glibc = ".".join(str(x) for x in min(floors)) if floors else ""
    return pythons, glibc


def summarize(name: str, version: str, filenames: list[str]) -> PackageWheels:
    """The facts of one release from its wheel file names (what the manifests' ``wheels:`` entries hold)."""
    pythons: set[str] = set()
    floors: list[str] = []
    for filename in filenames:
        tags = wheel_tags(filename)
        if tags is None:
            continue
        pythons |= tags[0]
        if tags[1]:
            floors.append(tags[1])
    if "any" in pythons:
        pythons = {"any"}
    ordered = sorted(pythons, key=lambda p: version_tuple(p) if p != "any" else (0,))
    return PackageWheels(name, version, tuple(ordered), min(floors, key=version_tuple) if floors else "")


def registry_wheels(name: str, version: str, pip: tuple[str, ...] = (sys.executable, "-m", "pip")) -> list[str]:
    """The wheel file names pip finds for ``name==version`` in its configured indexes (one probe-up: the platform
    asked for matches no binary wheel, so pip lists every link and skips them; a pure-Python wheel matches any
    platform and is downloaded, into a temporary directory removed at once)."""
    with tempfile.TemporaryDirectory(prefix="pdfleet-wheels-") as dest:
        proc = subprocess.run(
            [*pip, "download", "--no-deps", "--only-binary=:all:", "-vv", "--platform", "pdfleet_lists_only",
             "--dest", dest, f"{name}=={version}"],
            capture_output=True, text=True, check=False, timeout=300,
        )
    out = proc.stdout + proc.stderr
    project = re.sub(r"[-_.]+", "_", name).lower()
    links = [link.rsplit("/", 1)[-1].split("#", 1)[0] for link in _LINK_RE.findall(out)]
    mine = [n for n in links if re.sub(r"[-_.]+", "_", n.split("-", 1)[0]).lower() == project]
    if not mine:  # not one release of the project listed: the index was not read (or the name is wrong)
        tail = "\n".join(out.strip().splitlines()[-5:])
        raise PatchError(f"pip listed no wheel of {name} at all; is the package index reachable?\n{tail}")
    return sorted({n for n in mine if n.split("-")[1] == version})


def main(argv: list[str] | None = None) -> int:
    """Print the wheel facts of releases as read from the registry (``NAME==VERSION`` ...), in the manifests'
    ``wheels:`` format, to check or update them when a pin changes."""
    parser = argparse.ArgumentParser(prog="python -m pdfleet.patch.wheels", description=main.__doc__)
    parser.add_argument("requirements", nargs="+", help="NAME==VERSION")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = {}
    for req in args.requirements:
        name, _, version = req.partition("==")
        facts = summarize(name, version, registry_wheels(name, version))
        out[req] = {"version": version, "pythons": list(facts.pythons), "glibc": facts.glibc}
    print(json.dumps(out, indent=2) if args.json else yaml.safe_dump(out, sort_keys=False, default_flow_style=None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
