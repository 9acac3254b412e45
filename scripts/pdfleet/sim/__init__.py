"""Simulated cluster: throwaway systemd hosts (systemd-nspawn containers) on this machine, reachable over
SSH on a private bridge, that Ansible converges like real hosts.

    cluster = up([SimHost("node1", "10.77.0.11")], SimNetwork("pdfleet0", "10.77.0.0/24", "10.77.0.1"),
                 state_dir=DEFAULT_STATE_DIR, progress=print)
    ...
    down(DEFAULT_STATE_DIR, print)
"""

from .hosts import down, ssh, status, up
from .hosttypes import (
    DEFAULT_CACHE_DIR,
    DEFAULT_STATE_DIR,
    HostStatus,
    SimCluster,
    SimError,
    SimHost,
    SimNetwork,
)
from .image import GOLDEN_PACKAGES, RUNTIME_MOUNT, RUNTIME_PACKAGES

__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_STATE_DIR",
    "GOLDEN_PACKAGES",
    "RUNTIME_MOUNT",
    "RUNTIME_PACKAGES",
    "HostStatus",
    "SimCluster",
    "SimError",
    "SimHost",
    "SimNetwork",
    "down",
    "ssh",
    "status",
    "up",
]
