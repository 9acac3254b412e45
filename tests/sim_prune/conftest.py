"""One scratch cluster (tests/simcluster.py) for the removal tests, converged once and changed by each test in
turn: the tests run in file order and each leaves the cluster converged for the next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from simcluster import ScratchCluster, scratch_cluster, skip_reason


@pytest.fixture(scope="session")
def prune_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    """The scratch cluster converged by site.yml (pd-4p4d, patched; its verification passed)."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with scratch_cluster(tmp_path_factory.mktemp("prunecluster")) as cluster:
        cluster.set_model("sglang", apply_patch=True)
        cluster.playbook()
        cluster.wait_ready()
        yield cluster
