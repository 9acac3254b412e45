"""Plain data types and errors shared by the simulated-host layer."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pdfleet.errors import PdfleetError

DEFAULT_STATE_DIR = Path("/var/lib/pdfleet-sim")
# The golden image and CPU runtime cache; $PDFLEET_SIM_CACHE_DIR moves it for every sim command a run starts (the
# playbooks' included: tests/bench/bench_converge.py --cold builds into an empty one).
DEFAULT_CACHE_DIR = Path(os.environ.get("PDFLEET_SIM_CACHE_DIR") or "/var/cache/pdfleet-sim")
DEFAULT_OS = "debian-12"  # what the golden image is; a host may report another (pdfleet_sim.distro)

Progress = Callable[[str], None]

_HOST_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


class SimError(PdfleetError):
    """A simulated-cluster operation failed; the message says what to do about it (CLI exit code 2)."""


@dataclass(frozen=True)
class SimHost:
    """One simulated host: its inventory name, its static address on the sim bridge and the distribution it
    reports (pdfleet_sim.distro; underneath every host is the Debian 12 image)."""

    name: str
    address: str
    os: str = DEFAULT_OS


@dataclass(frozen=True)
class SimNetwork:
    """The bridge the simulated hosts sit on, its subnet and this machine's address on it."""

    bridge: str
    cidr: str
    gateway: str


@dataclass(frozen=True)
class HostStatus:
    """What `status` reports for one host."""

    name: str
    address: str
    state: str  # "running" | "stopped"
    wrapper_pid: int | None = None
    init_pid: int | None = None
    ssh_port_open: bool = False
    memory_bytes: int | None = None  # PSS of every process in the host's cgroup
    with_runtime: bool = False


@dataclass(frozen=True)
class SimCluster:
    """A running simulated cluster and how to reach it."""

    hosts: tuple[SimHost, ...]
    network: SimNetwork
    state_dir: Path
    ssh_config: Path
    private_key: Path
    image_dir: Path
    runtime_dir: Path | None = None
    started: tuple[str, ...] = field(default=())  # hosts this `up` call (re)started

    def ansible_host_vars(self, host: SimHost) -> dict[str, str]:
        """Inventory variables that make Ansible (and testinfra) reach `host`."""
        return {
            "ansible_host": host.address,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.private_key),
            "ansible_ssh_common_args": f"-F {self.ssh_config}",
        }


def validate_host_name(name: str) -> None:
    if not _HOST_NAME.match(name):
        raise SimError(
            f"sim host name {name!r} is not usable: use 1-31 characters, lowercase letters, digits and '-', "
            "starting with a letter"
        )
