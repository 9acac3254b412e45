"""Scratch clusters for the rollout tests: one host (inventory/sim) and the fleet (inventory/sim-fleet), staged
pristine (apply_patch: false) with `site.yml --skip-tags verify`. PDFLEET_TEST_ROLLOUT_CLUSTER=<dir with
info.json> reuses a scratch cluster started by hand (then it is not torn down here)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT
from simcluster import SITE, ScratchCluster, scratch_cluster, skip_reason


def _staged(root: Path, source: Path) -> Iterator[ScratchCluster]:
    reuse = os.environ.get("PDFLEET_TEST_ROLLOUT_CLUSTER")
    if reuse:
        info = json.loads((Path(reuse) / "info.json").read_text())
        inv = Path(info["inventory"])
        c = ScratchCluster(inv, Path(info["state"]), "", info["router"], info["model"], Path(reuse) / "reports")
        c.wait_ready()
        yield c
        return
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with scratch_cluster(root, source=source) as c:
        c.set_model("sglang", apply_patch=False)
        c.playbook(SITE, "--skip-tags", "verify")  # item 7: a fleet staged in a known state, no final play
        c.wait_ready()
        yield c


@pytest.fixture(scope="module")
def one_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    yield from _staged(tmp_path_factory.mktemp("rollout1"), REPO_ROOT / "inventory" / "sim")


@pytest.fixture(scope="module")
def sim_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    yield from _staged(tmp_path_factory.mktemp("rolloutfleet"), REPO_ROOT / "inventory" / "sim-fleet")
