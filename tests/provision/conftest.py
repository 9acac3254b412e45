"""One scratch sim cluster (see tests/simcluster.py), converged with site.yml (provisioning included), shared by
every provisioning test and always torn down (hosts, bridge, nft rules and the stand-in repository's server)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from simcluster import ScratchCluster, scratch_cluster, skip_reason

HERE = Path(__file__).parent
PROVISION = HERE / "provision_only.yml"


@pytest.fixture(scope="session")
def provisioned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with scratch_cluster(tmp_path_factory.mktemp("provision")) as cluster:
        t0 = time.monotonic()
        cluster.playbook()
        cluster.wait_ready()
        print(f"\nprovisioned scratch cluster converged in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        yield cluster
