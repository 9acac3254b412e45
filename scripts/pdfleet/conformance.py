"""Conformance: does every host of an inventory match what the plan says it must be?

The checks themselves are the pytest-testinfra suite ``pdfleet.conformance_suite`` (SSH to each host, the
inventory's ssh_config), shipped in the package so an installed wheel runs it without a checkout (pytest and
pytest-testinfra are runtime dependencies for it); this module holds what they share, kept free of pytest so it
is unit-tested on its own: reading the inventory into per-host targets with their expectations, and turning
what a host reports (nvidia-smi, dpkg, ucx_info, nvcc; GPU peer access is judged by pdfleet.gpu_peers, which the
nixl role uses too) into a list of differences, each naming the host, what it found and what the plan expects.

    pdfleet conformance -i inventory/sim          # = pytest <package>/conformance_suite --inventory inventory/sim
    pdfleet conformance -i inv -- -k gpu -x       # extra pytest arguments after --
    pdfleet conformance -i inv -- --collect-only  # list the checks per host without connecting to any

Exit codes: 0 every check passed, 1 a check failed, 2 the suite could not run (bad inventory, no hosts).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pdfleet.clusterspec import HostSpec, parse_cluster
from pdfleet.errors import InventoryError, PdfleetError
from pdfleet.inventory import ROOT_VARIABLE, HostConnection, InventorySource, load_inventory
from pdfleet.inventory_flags import add_inventory_arguments, source_from_args
from pdfleet.paths import PACKAGE_DIR, PATCH_DIR, REPO_ROOT
from pdfleet.planner import Plan, Unit
from pdfleet.versions import DRIVER_HOLD_REGEX

# The suite: package modules (the wheel carries it), run by pytest from the installed package's own copy.
SUITE_DIR = PACKAGE_DIR / "conformance_suite"
# What is held: every package of the driver (constants.yml, which the nvidia_driver role reads too).
HELD_PACKAGES = DRIVER_HOLD_REGEX["Debian"]
SMI_QUERY = "name,memory.total,compute_cap,driver_version"


# Inventory variables of the provisioning roles that the checks read (templated per host, like a play would).
SETTINGS = ("nvidia_driver_modinfo_command", "nixl_ucx_info")


@dataclass(frozen=True)
class Target:
    """One host to check: how to reach it and what it must be."""

    name: str
    connection: HostConnection
    spec: HostSpec | None  # None: a host without GPUs in the model (a router-only host, say)
    units: tuple[Unit, ...]
    settings: Mapping[str, object] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return self.connection.address

    @property
    def url(self) -> str:
        return self.connection.testinfra_url()

    @property
    def ssh_config(self) -> str | None:
        return self.connection.ssh_config

    @property
    def identity(self) -> str | None:
        return self.connection.key_file

    def setting(self, name: str, default: object) -> object:
        """An inventory variable of the provisioning roles (e.g. nvidia_driver_modinfo_command)."""
        value = self.settings.get(name)
        return default if value is None else value


@dataclass(frozen=True)
class Expectations:
    """The whole inventory: its plan and its targets."""

    inventory: InventorySource
    plan: Plan
    targets: tuple[Target, ...]


def load(source: InventorySource | str | Path, ssh_config: str | None = None) -> Expectations:
    """Plan the inventory and describe each host to check; raise InventoryError/PlanError when it can't."""
    from pdfleet.inventory_plan import plan_of

    src = InventorySource.of(source)
    inv = load_inventory(src)
    plan = plan_of(inv)
    model = parse_cluster(inv.shared_var(ROOT_VARIABLE))
    targets = []
    for name in inv.host_names:
        conn = inv.connection(name)
        if ssh_config:
            conn = dataclasses.replace(conn, ssh_args=("-F", ssh_config, *conn.ssh_args))
        targets.append(Target(
            name=name, connection=conn, spec=model.hosts.get(name), units=tuple(plan.hosts.get(name, [])),
            settings={k: inv.var(name, k) for k in SETTINGS},
        ))
    if not targets:
        raise InventoryError(f"{src.describe()}: no hosts to check")
    return Expectations(src, plan, tuple(targets))


# ---------------------------------------------------------------- what the hosts report


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int
    compute_cap: str
    driver: str


def parse_smi(stdout: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv,noheader,nounits`."""
    gpus = []
    for line in stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        name, memory, cc, driver = parts
        gpus.append(Gpu(name, int(memory) if memory.isdigit() else -1, cc, driver))
    return gpus


def gpu_problems(host: str, gpus: Sequence[Gpu], spec: HostSpec) -> list[str]:
    """Differences between the GPUs a host reports and the inventory model's host."""
    out = []
    if len(gpus) != spec.gpu_count:
        out.append(f"{host}: nvidia-smi lists {len(gpus)} GPUs, expected {spec.gpu_count} "
                   f"(pdfleet_cluster.hosts.{host}.gpu_count)")
    for i, g in enumerate(gpus):
        if g.name != spec.gpu_model:
            out.append(f"{host}: GPU {i} is {g.name!r}, expected {spec.gpu_model!r}")
        if g.memory_mib != spec.gpu_memory_mib:
            out.append(f"{host}: GPU {i} has {g.memory_mib} MiB, expected {spec.gpu_memory_mib} MiB")
        if g.compute_cap != spec.compute_capability:
            out.append(f"{host}: GPU {i} has compute capability {g.compute_cap}, expected {spec.compute_capability}")
    return out


def driver_problems(host: str, gpus: Sequence[Gpu], module_version: str, pin: str) -> list[str]:
    out = []
    for found in sorted({g.driver for g in gpus}):
        if found != pin:
            out.append(f"{host}: the running driver is {found}, the pin is {pin} (pdfleet_cluster.cuda.driver_version)")
    if module_version != pin:
        out.append(f"{host}: the installed kernel module is {module_version or '(none)'}, the pin is {pin}")
    return out


def hold_problems(host: str, dpkg_lines: Iterable[str], pin: str) -> list[str]:
    """`dpkg-query -W -f '${db:Status-Want} ${db:Status-Status} ${Package} ${Version}\\n' 'nvidia-*' ...`."""
    out = []
    seen = 0
    for line in dpkg_lines:
        words = line.split()
        if len(words) != 4 or words[1] != "installed" or not HELD_PACKAGES.match(words[2]):
            continue
        seen += 1
        want, _status, package, version = words
        if want != "hold":
            out.append(f"{host}: package {package} {version} is not held (dpkg selection {want!r}); "
                       f"fix: apt-mark hold {package}, or rerun provision.yml")
        if not version.startswith(pin + "-"):
            out.append(f"{host}: package {package} is at {version}, not the pinned {pin}")
    if not seen:
        out.append(f"{host}: no nvidia-*/libnvidia-* package is installed")
    return out


def ucx_transports(stdout: str) -> set[str]:
    return set(re.findall(r"Transport:\s*(\S+)", stdout))


def ucx_devices(stdout: str) -> set[str]:
    return set(re.findall(r"Device:\s*(\S+)", stdout))


def required_transports(units: Sequence[Unit]) -> tuple[set[str], set[str]]:
    """(transports, devices) that ucx_info -d must list for this host's PD units (planned, first-class fields)."""
    tls: set[str] = set()
    devices: set[str] = set()
    for u in units:
        tls |= set(u.required_transports)
        devices |= set(u.ucx_net_devices)
    return tls, devices


def pd_gpus(units: Sequence[Unit]) -> tuple[list[int], list[int]]:
    """(prefill GPUs, decode GPUs) of one host's planned units: the pairs whose peer access the KV path needs."""
    prefill = sorted({g for u in units if u.role == "prefill" for g in u.gpus})
    decode = sorted({g for u in units if u.role == "decode" for g in u.gpus})
    return prefill, decode


def nvcc_release(stdout: str) -> str | None:
    m = re.search(r"release (\d+\.\d+),", stdout)
    return m.group(1) if m else None


CONN_MODULE = "sglang.srt.disaggregation.nixl.conn"
# Run by the service venv's python: where the import system finds the conn module (its parent packages are
# imported, the module itself is not).
CONN_ORIGIN_SNIPPET = f"import importlib.util as u; print(u.find_spec({CONN_MODULE!r}).origin)"


def patched_sha256(version: str, patched: bool, patch_dir: Path = PATCH_DIR) -> str:
    """The sha256 the manifest promises for conn.py of `version`, patched or pristine."""
    from pdfleet.patch import manifest as patches

    m = patches.load_manifest(version, patch_dir)
    return m.patched_sha256 if patched else m.pristine_sha256


# ---------------------------------------------------------------- CLI


def source_option(source: InventorySource) -> str:
    """The whole inventory source (paths, -e, vault) as one pytest option value."""
    return json.dumps({"paths": [str(p) for p in source.paths], "extra_vars": list(source.extra_vars),
                       "vault_password_files": list(source.vault_password_files),
                       "vault_ids": list(source.vault_ids)})


def source_from_option(text: str) -> InventorySource:
    """--inventory of the suite: a path, or the JSON that `pdfleet conformance` passes."""
    if not text.lstrip().startswith("{"):
        return InventorySource.of(text)
    data = json.loads(text)
    return InventorySource(tuple(Path(p) for p in data["paths"]), tuple(data["extra_vars"]),
                           tuple(data["vault_password_files"]), tuple(data["vault_ids"]))


def run_suite(source: InventorySource, ssh_config: str | None, extra: Sequence[str]) -> int:
    """Run the testinfra suite; pytest's exit codes map to 0 pass, 1 a check failed, 2 could not run."""
    try:
        load(source, ssh_config)  # fail fast, with the planner's message, before pytest starts
    except PdfleetError as exc:
        print(f"pdfleet: {exc}", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "pytest", str(SUITE_DIR), "-p", "no:cacheprovider", "-q", "--no-header",
           "-rf", "--tb=short", "--inventory", source_option(source)]
    if ssh_config:
        cmd += ["--conformance-ssh-config", ssh_config]
    rc = subprocess.run([*cmd, *extra], cwd=REPO_ROOT, check=False).returncode
    return {0: 0, 1: 1}.get(rc, 2)


def _cmd(args: argparse.Namespace) -> int:
    extra = [a for a in args.pytest_args if a != "--"]
    return run_suite(source_from_args(args), args.ssh_config, extra)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("conformance", help="check every host against the plan (pytest-testinfra over SSH)")
    add_inventory_arguments(p)
    p.add_argument("--ssh-config", help="ssh_config for reaching the hosts (default: the inventory's -F, or the sim's)")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="extra pytest arguments, after --")
    p.set_defaults(func=_cmd)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pdfleet")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
