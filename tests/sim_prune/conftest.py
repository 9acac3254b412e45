"""One scratch cluster (tests/simcluster.py) for the removal tests, converged once and changed by each test in
turn: the tests run in file order and each leaves the cluster converged for the next."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from simcluster import ScratchCluster, scratch_cluster, skip_reason

# pd-4p4d on node1 with two pairs' worth of instances, so that instances can be removed: prefill0 and prefill1
# on GPUs 0-1 and 2-3, decode0 and decodeB on 4-5 and 6-7 (TP2 each; the planner wants the GPUs split evenly).
PREFILL0 = {"name": "prefill0", "role": "prefill", "host": "node1", "gpus": [0, 1], "tp": 2, "port": 30000,
            "nccl_port": 30100, "bootstrap_port": 8998}
PREFILL1 = {"name": "prefill1", "role": "prefill", "host": "node1", "gpus": [2, 3], "tp": 2, "port": 30003,
            "nccl_port": 30103, "bootstrap_port": 8999}
DECODE0 = {"name": "decode0", "role": "decode", "host": "node1", "gpus": [4, 5], "tp": 2, "port": 30001,
           "nccl_port": 30101}
DECODEB = {"name": "decodeB", "role": "decode", "host": "node1", "gpus": [6, 7], "tp": 2, "port": 30002,
           "nccl_port": 30102}
FOUR = [PREFILL0, PREFILL1, DECODE0, DECODEB]


def set_instances(cluster: ScratchCluster, profile: str, instances: list[dict[str, Any]]) -> None:
    """Replace pdfleet_cluster.profile and .instances in the scratch inventory."""
    path = cluster.inventory / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(path.read_text())
    data["pdfleet_cluster"]["profile"] = profile
    data["pdfleet_cluster"]["instances"] = instances
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="session")
def prune_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    """The scratch cluster converged by site.yml (pd-4p4d with the FOUR workers, patched; its verification passed)."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with scratch_cluster(tmp_path_factory.mktemp("prunecluster")) as cluster:
        cluster.set_model("sglang", apply_patch=True)
        set_instances(cluster, "pd-4p4d", FOUR)
        cluster.playbook()
        cluster.wait_ready()
        yield cluster
