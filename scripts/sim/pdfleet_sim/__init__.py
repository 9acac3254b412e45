"""Simulated cluster: throwaway systemd hosts (systemd-nspawn containers) on this machine, reachable over
SSH on a private bridge, that Ansible converges like real hosts. The separate pdfleet-sim distribution
(scripts/sim/pyproject.toml), never part of the production pdfleet package.

    cluster = up([SimHost("node1", "10.77.0.11")], SimNetwork("pdfleet0", "10.77.0.0/24", "10.77.0.1"),
                 state_dir=DEFAULT_STATE_DIR, progress=print)
    ...
    down(DEFAULT_STATE_DIR, print)

The names below are imported on first use: the stand-in workers (``python -m pdfleet_sim.worker``, on every sim
host) import this package and need none of the host machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdfleet.lazyexports import lazy_getattr

if TYPE_CHECKING:
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

_HOME = {
    "down": "hosts", "ssh": "hosts", "status": "hosts", "up": "hosts",
    "DEFAULT_CACHE_DIR": "hosttypes", "DEFAULT_STATE_DIR": "hosttypes", "HostStatus": "hosttypes",
    "SimCluster": "hosttypes", "SimError": "hosttypes", "SimHost": "hosttypes", "SimNetwork": "hosttypes",
    "GOLDEN_PACKAGES": "image", "RUNTIME_MOUNT": "image", "RUNTIME_PACKAGES": "image",
}

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


__getattr__ = lazy_getattr(__name__, _HOME, globals())
