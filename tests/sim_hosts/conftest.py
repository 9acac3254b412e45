"""Fixtures for the simulated-host tests: a 2-host cluster on a bridge and subnet of its own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet_sim import SimCluster, SimHost, SimNetwork, down, up
from pdfleet_sim.system import missing_tools


def sim_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "sim tests need root (bridge, nftables, overlay mounts, systemd-nspawn)"
    missing = missing_tools()
    if missing:
        return f"sim tests need these packages: apt-get install -y {' '.join(missing)}"
    return None


@pytest.fixture(scope="session")
def sim_available() -> None:
    reason = sim_skip_reason()
    if reason:
        pytest.skip(reason)


def make_network(slot: int = 0) -> SimNetwork:
    """A bridge and subnet unlikely to clash with a real cluster (10.77.0.0/24) or another test run."""
    n = (os.getpid() + slot) % 200 + 20
    bridge = f"pdft{os.getpid() % 100000}{slot}"
    return SimNetwork(bridge=bridge, cidr=f"10.78.{n}.0/24", gateway=f"10.78.{n}.1")


def make_hosts(network: SimNetwork, count: int) -> list[SimHost]:
    base = network.gateway.rsplit(".", 1)[0]
    return [SimHost(f"simt{i}", f"{base}.{10 + i}") for i in range(1, count + 1)]


def _print(msg: str) -> None:
    print(f"[sim] {msg}", flush=True)


@pytest.fixture(scope="module")
def sim_cluster(sim_available: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    """Two running hosts without the heavy runtime; always torn down, also when a test fails."""
    state_dir = tmp_path_factory.mktemp("sim") / "state"
    network = make_network(0)
    try:
        yield up(make_hosts(network, 2), network, state_dir=state_dir, progress=_print, with_runtime=False)
    finally:
        down(state_dir, _print)


@pytest.fixture
def sim_state_dir(sim_available: None, tmp_path: Path) -> Iterator[Path]:
    """A state dir for a test that runs its own cluster; whatever it leaves is torn down."""
    state_dir = tmp_path / "state"
    try:
        yield state_dir
    finally:
        down(state_dir, _print)
