"""The simulated PD inventories run their workers at the production log level, info (issue 25 item 4): the
abort evidence of the verification and of every rollout gate is our patch's info-level count of the ABORTs the
prefill handled, so a run at info is conclusive; debug logging must not be what makes it so."""

from __future__ import annotations

import pytest
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT


@pytest.mark.parametrize("name", ["sim", "sim-fleet", "examples/pd-4p4d", "examples/pd-fleet"])
def test_pd_workers_log_at_info(name: str) -> None:
    plan = plan_inventory(REPO_ROOT / "inventory" / name)
    workers = [u for units in plan.hosts.values() for u in units if u.kind == "worker"]
    assert {u.role for u in workers} == {"prefill", "decode"}
    for u in workers:
        assert "--log-level info" in u.exec_start_line, f"{name}: {u.name}: {u.exec_start_line}"
