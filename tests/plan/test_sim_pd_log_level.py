"""The simulated PD inventories run their workers at debug level: the prefill logs its handling of a decode's
ABORT at debug only, and that line is the abort evidence of the verification and of every rollout gate (at info
level each gate of a rollout on the sim fleet was INCONCLUSIVE, so every host was rolled back)."""

from __future__ import annotations

import pytest
from pdfleet.cluster import plan_inventory
from pdfleet.paths import REPO_ROOT


@pytest.mark.parametrize("name", ["sim", "sim-fleet"])
def test_sim_pd_workers_log_at_debug(name: str) -> None:
    plan = plan_inventory(REPO_ROOT / "inventory" / name)
    workers = [u for units in plan.hosts.values() for u in units if u.kind == "worker"]
    assert {u.role for u in workers} == {"prefill", "decode"}
    for u in workers:
        assert "--log-level debug" in u.exec_start_line, f"{name}: {u.name}: {u.exec_start_line}"
