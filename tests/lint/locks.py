"""Hash locks for the virtualenvs pdfleet installs from the package registry: each package, its version and the
sha256 of the wheel a host takes, for every distribution the bundle supports (constants.yml
``distribution_pythons``: their Python and glibc), so that `pip install --require-hashes` refuses a changed or
unlisted file and no transitive dependency floats.

One job: resolve a lock's top-level pins with pip itself (``pip install --dry-run --report``, wheels only, for each
distribution's Python and glibc, on x86-64 Linux) and write the lock file; check that a lock file is current
(its header names the pins it was made from).

    .venv/bin/python tests/lint/locks.py watchdog            # rewrite the role's files/requirements.lock
    .venv/bin/python tests/lint/locks.py watchdog --check    # exit 1 (naming the difference) when the pins changed
    .venv/bin/python tests/lint/locks.py gateway             # the gateway's venv at constants.yml's router pin
    .venv/bin/python tests/lint/locks.py gateway --pin smg==1.14.0   # another release's (the sglang role's
                                                                     # files/gateway/<name>-<version>.lock)
    .venv/bin/python tests/lint/locks.py service --pin sglang==0.5.23  # the service venv of a SGLang release (the
                                                                       # sglang role's files/service/sglang-<v>.lock)

A maintainer's tool beside role_readmes.py (it writes a role's file), not part of the pdfleet package: the package
and the roles meet only through the plan. tests/lint/test_locks.py holds the shipped lock current.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pdfleet.versions import CONSTANTS

PINS_LINE = "# From: "
TOOL = ".venv/bin/python tests/lint/locks.py"
ARCH = "x86_64"
# manylinux1/2010/2014 are the old names of manylinux_2_5/2_12/2_17 (PEP 600); pip matches both.
LEGACY_TAGS = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}


class LockError(Exception):
    """A lock that cannot be made or is out of date."""


@dataclass(frozen=True)
class LockSpec:
    """Where a lock's top-level pins live (a role's defaults, or given) and where its lock file goes."""

    defaults: Path | None  # a YAML file holding the pins (None: ``pins``)
    key: str  # the list of "name==version" pins in it
    path: Path  # the lock file
    what: str  # for the header
    pins: tuple[str, ...] = ()  # the pins themselves, where there is no defaults file
    command: str = ""  # the tool's arguments that make this lock (the header and the fixes name them)
    # the distributions (constants.yml distribution_pythons) it is made for; empty: all of them
    distributions: tuple[str, ...] = ()


ROLES = Path(__file__).resolve().parents[2] / "ansible" / "roles"
# The gateway's locks, one per router release (the sglang role installs files/gateway/<name>-<version>.lock of the
# plan's router_package and router_version into the router's venv).
GATEWAY_LOCKS = ROLES / "sglang" / "files" / "gateway"
# The release of each router package the bundle ships a lock for: constants.yml's pin (smg), and sglang-router's last
# release (the router of SGLang's tree, still accepted as pdfleet_cluster.sglang.router_package).
GATEWAY_PIN = f"{CONSTANTS['pins']['sglang_router_package']}=={CONSTANTS['pins']['sglang_router_version']}"
SGLANG_ROUTER_PIN = f"sglang-router=={CONSTANTS['router_releases']['sglang-router']}"


def gateway_spec(pin: str, command: str = "") -> LockSpec:
    """The lock of the gateway's venv for one router release, "smg==1.13.0" (``command``: the tool's arguments
    that make it, if not `gateway --pin PIN`)."""
    package, sep, version = pin.partition("==")
    if not sep or not package or not version or "/" in pin or pin.strip() != pin:
        raise LockError(f"{pin!r}: a gateway pin is name==version (smg==1.13.0)")
    return LockSpec(None, "", GATEWAY_LOCKS / f"{_canonical(package)}-{version}.lock",
                    f"the gateway's virtualenv ({pin})", (pin,), command or f"gateway --pin {pin}")


# The service venv's locks, one per SGLang release the bundle ships a patch for (the sglang role installs
# files/service/sglang-<version>.lock of the planned sglang.version in pypi mode: SGLang with every dependency).
SERVICE_LOCKS = ROLES / "sglang" / "files" / "service"


def service_spec(version: str) -> LockSpec:
    """The lock of the service venv for SGLang ``version`` (a release with a patch manifest), made for the
    distributions whose Python and glibc can install that pin (its manifest's `wheels:`). SGLang and constants.yml's
    NIXL pin are resolved together: both live in that venv and share torch and the CUDA wheels, so one resolution
    gives the one set of versions the venv converges to."""
    from pdfleet.patch.errors import PatchError
    from pdfleet.patch.wheels import load_pin_wheels

    try:
        pin = load_pin_wheels(version)
    except PatchError as e:
        raise LockError(str(e)) from None
    own = pin.only({p.name for p in pin.packages if p.name in OWN_WHEELS})
    dists = tuple(t.name for t in targets() if not own.missing(t.python, t.glibc))
    if not dists:
        raise LockError(f"SGLang {version} installs on none of the supported distributions ({own.pythons})")
    nixl = f"nixl=={CONSTANTS['pins']['nixl_version']}"
    return LockSpec(None, "", SERVICE_LOCKS / f"sglang-{version}.lock",
                    f"the service virtualenv (SGLang {version} and NIXL, resolved together)",
                    (f"sglang=={version}", nixl), f"service --pin sglang=={version}", dists)


def service_locks() -> dict[str, LockSpec]:
    """The service venv's lock of every SGLang release with a patch manifest (the planner accepts no other)."""
    from pdfleet.patch.manifest import supported_versions

    return {f"service-{v}": service_spec(v) for v in supported_versions()}


# A SGLang pin's own wheels (its manifest's `wheels:`), which decide the distributions its service lock is for.
OWN_WHEELS = ("sglang", "sglang-kernel", "torch")


def service_pin_spec(pin: str) -> LockSpec:
    """``service_spec`` of a pin given as sglang==VERSION."""
    package, sep, version = pin.partition("==")
    if _canonical(package) != "sglang" or not sep or not version or "/" in version or pin.strip() != pin:
        raise LockError(f"{pin!r}: a service pin is sglang==VERSION (sglang==0.5.23)")
    return service_spec(version)


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


LOCKS: dict[str, LockSpec] = {
    "watchdog": LockSpec(ROLES / "pdfleet_watchdog" / "defaults" / "main.yml", "pdfleet_watchdog_python_packages",
                         ROLES / "pdfleet_watchdog" / "files" / "requirements.lock",
                         "the pdfleet_watchdog role's virtualenv", command="watchdog"),
    "gateway": gateway_spec(GATEWAY_PIN, "gateway"),
    "gateway-sglang-router": gateway_spec(SGLANG_ROUTER_PIN, "gateway-sglang-router"),
}


@dataclass(frozen=True)
class Target:
    """One supported distribution: its system Python (major.minor) and glibc."""

    name: str
    python: str
    glibc: str

    def platforms(self) -> list[str]:
        """The manylinux platform tags a host of this glibc accepts, newest first (pip's own order)."""
        minor = int(self.glibc.split(".")[1])
        tags: list[str] = []
        for m in range(minor, 4, -1):
            tags.append(f"manylinux_2_{m}_{ARCH}")
            if m in LEGACY_TAGS:
                tags.append(f"{LEGACY_TAGS[m]}_{ARCH}")
        return tags


def targets() -> list[Target]:
    return [Target(name, str(v["python"]), str(v["glibc"]))
            for name, v in sorted(CONSTANTS["distribution_pythons"].items())]


def pins_of(spec: LockSpec) -> list[str]:
    if spec.defaults is None:
        return sorted(spec.pins, key=str.lower)
    data = yaml.safe_load(spec.defaults.read_text())
    pins = data.get(spec.key) if isinstance(data, dict) else None
    if not isinstance(pins, list) or not all(isinstance(p, str) and "==" in p for p in pins):
        raise LockError(f"{spec.defaults}: {spec.key} is not a list of name==version pins")
    return sorted(pins, key=str.lower)


def _pins_source(spec: LockSpec) -> str:
    return f"{spec.defaults} ({spec.key})" if spec.defaults is not None else "its file name"


Resolved = dict[str, tuple[str, str]]  # canonical name[extras] -> (version, sha256)
Resolver = Callable[[Sequence[str], Target], Resolved]


def _environment(target: Target, extra: str) -> dict[str, str]:
    """PEP 508 marker variables of a host of ``target`` (CPython on x86-64 Linux)."""
    return {"python_version": target.python, "python_full_version": f"{target.python}.0", "os_name": "posix",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": ARCH,
            "platform_python_implementation": "CPython", "implementation_name": "cpython", "extra": extra}


def asked_extras(items: Sequence[Mapping[str, Any]], target: Target) -> dict[str, set[str]]:
    """{canonical name: the extras asked of it} by the installed items' own requirements (metadata requires_dist) as
    they apply on ``target``, each item's requirements under the extras asked of it in turn (pip's report names only
    the extras a user asked for)."""
    from packaging.requirements import Requirement

    reqs = {_canonical(i["metadata"]["name"]): [Requirement(r) for r in i["metadata"].get("requires_dist") or []]
            for i in items}
    asked: dict[str, set[str]] = {name: {_canonical(e) for e in i.get("requested_extras") or []}
                                  for name, i in zip(reqs, items, strict=True)}
    changed = True
    while changed:  # an extra asked of a package can ask extras of its own dependencies
        changed = False
        for name, requirements in reqs.items():
            for req in requirements:
                dep = _canonical(req.name)
                if dep not in reqs or not req.extras:
                    continue
                applies = any(req.marker is None or req.marker.evaluate(_environment(target, e))
                              for e in ("", *sorted(asked[name])))
                new = {_canonical(e) for e in req.extras} - asked[dep]
                if applies and new:
                    asked[dep] |= new
                    changed = True
    return {name: extras for name, extras in asked.items() if extras}


def pip_resolve(pins: Sequence[str], target: Target) -> Resolved:
    """What pip installs for ``pins`` on ``target`` (wheels only): each package's version and its wheel's sha256,
    from pip's installation report (nothing is installed)."""
    with tempfile.TemporaryDirectory(prefix="pdfleet-lock-") as tmp:
        report = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                "--disable-pip-version-check", "--report", str(report), "--only-binary=:all:",
                "--python-version", target.python, "--implementation", "cp", "--target", str(Path(tmp) / "t")]
        for tag in target.platforms():
            argv += ["--platform", tag]
        proc = subprocess.run([*argv, *pins], capture_output=True, text=True, check=False, timeout=900)
        if proc.returncode != 0:
            raise LockError(f"pip could not resolve {' '.join(pins)} for {target.name} (CPython {target.python}, "
                            f"glibc {target.glibc}): {proc.stderr.strip()[-800:]}")
        doc = json.loads(report.read_text())
    out: Resolved = {}
    asked = asked_extras(doc.get("install", []), target)
    for item in doc.get("install", []):
        hashes = item.get("download_info", {}).get("archive_info", {}).get("hashes", {})
        if "sha256" not in hashes:
            raise LockError(f"pip's report gives no sha256 for {item['metadata']['name']} ({target.name}); "
                            "the index must publish hashes")
        # also with the extras asked of it (flashinfer-python wants cuda-tile[tileiras]): pip's hash-checking mode
        # refuses a requirement with extras unless the lock pins it with them, and a plain one (flash-attn-4's
        # nvidia-cutlass-dsl beside flashinfer's nvidia-cutlass-dsl[cu13]) unless it pins that too
        canonical = _canonical(item["metadata"]["name"])
        out[canonical] = (item["metadata"]["version"], hashes["sha256"])
        if extras := sorted(asked.get(canonical, set())):
            out[f"{canonical}[{','.join(extras)}]"] = out[canonical]
    return out


def render(spec: LockSpec, pins: Sequence[str], by_target: Mapping[Target, Resolved]) -> str:
    """The lock file: one requirement per package with every wheel hash the targets take; a package not all
    targets install, or at a version that differs between them, carries a python_version marker per version."""
    names = sorted({n for r in by_target.values() for n in r})
    pythons = sorted({t.python for t in by_target}, key=lambda v: tuple(int(x) for x in v.split(".")))
    dists = ", ".join(f"{t.name} {t.python}" for t in sorted(by_target, key=lambda t: t.name))
    lines = [f"# Hash lock of {spec.what}: every package and the sha256 of each wheel a supported",
             f"# distribution's Python takes ({dists}; x86-64 Linux).",
             f"# Installed with pip --require-hashes. Made by `{TOOL} {_lock_name(spec)}` from the pins below:",
             "# do not edit.",
             f"{PINS_LINE}{' '.join(pins)}"]
    for name in names:
        versions: dict[str, list[Target]] = {}
        for t, resolved in by_target.items():
            if name in resolved:
                versions.setdefault(resolved[name][0], []).append(t)
        for version, ts in sorted(versions.items()):
            hashes = sorted({by_target[t][name][1] for t in ts})
            on = sorted({t.python for t in ts}, key=pythons.index)
            marker = "" if on == pythons else " ; " + " or ".join(f'python_version == "{p}"' for p in on)
            lines.append(f"{name}=={version}{marker} \\")
            lines += [f"    --hash=sha256:{h}" + (" \\" if i < len(hashes) - 1 else "") for i, h in enumerate(hashes)]
    return "\n".join(lines) + "\n"


def _lock_name(spec: LockSpec) -> str:
    return spec.command or next(name for name, s in LOCKS.items() if s == spec)


def make(spec: LockSpec, resolve: Resolver = pip_resolve, log: Callable[[str], None] = print) -> str:
    pins = pins_of(spec)
    by_target: dict[Target, Resolved] = {}
    for t in targets():
        if spec.distributions and t.name not in spec.distributions:
            continue
        log(f"resolving for {t.name} (CPython {t.python}, glibc {t.glibc}) ...")
        by_target[t] = resolve(pins, t)
    return render(spec, pins, by_target)


def lock_pins(text: str) -> list[str] | None:
    """The pins a lock file says it was made from (None: not a lock file of ours)."""
    for line in text.splitlines():
        if line.startswith(PINS_LINE):
            return line[len(PINS_LINE):].split()
    return None


def check(spec: LockSpec) -> str:
    """"" when the lock file is current; else what differs and the fix."""
    try:
        made_from = lock_pins(spec.path.read_text())
    except OSError as e:
        return f"{spec.path}: cannot read the lock ({e.strerror}); make it with `{TOOL} {_lock_name(spec)}`"
    pins = pins_of(spec)
    if made_from != pins:
        return (f"{spec.path} was made from {made_from} but {_pins_source(spec)} pins {pins}: "
                f"make it again with `{TOOL} {_lock_name(spec)}` and commit it")
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="write (or --check) the hash lock of a virtualenv pdfleet installs")
    p.add_argument("name", choices=sorted([*LOCKS, "service"]))
    p.add_argument("--check", action="store_true", help="only say whether the lock matches its pins")
    p.add_argument("--pin", help="gateway: the router release to lock (name==version), if not constants.yml's; "
                                 "service (required): the SGLang release, sglang==VERSION")
    args = p.parse_args(argv)
    if args.pin and args.name not in ("gateway", "service"):
        p.error("--pin goes with gateway or service only")
    if args.name == "service" and not args.pin:
        p.error("service needs --pin sglang==VERSION (a release with a patch manifest)")
    try:
        spec = (service_pin_spec(args.pin) if args.name == "service"
                else gateway_spec(args.pin) if args.pin else LOCKS[args.name])
        if args.check:
            problem = check(spec)
            print(problem or f"{spec.path}: current", file=sys.stderr if problem else sys.stdout)
            return 1 if problem else 0
        text = make(spec, log=lambda m: print(m, file=sys.stderr))
    except LockError as e:
        print(f"locks: {e}", file=sys.stderr)
        return 2
    spec.path.parent.mkdir(parents=True, exist_ok=True)
    spec.path.write_text(text)
    count = sum(1 for line in text.splitlines() if "==" in line and not line.startswith("#"))
    print(f"wrote {spec.path} ({count} requirements)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
