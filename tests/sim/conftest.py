"""The scratch cluster of the sim integration tests (see tests/simcluster.py), on its own subnet."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from simcluster import ScratchCluster, scratch_cluster, skip_reason


@pytest.fixture(scope="session")
def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with scratch_cluster(tmp_path_factory.mktemp("simcluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def converged(sim_cluster: ScratchCluster) -> ScratchCluster:
    """The scratch cluster converged by site.yml with the patch applied (its verification play passed)."""
    sim_cluster.set_model("sglang", apply_patch=True)
    sim_cluster.playbook()
    sim_cluster.wait_ready()
    return sim_cluster
