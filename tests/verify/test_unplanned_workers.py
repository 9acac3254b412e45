"""Config gate: a worker the router routes to that the plan does not name (a stale pdfleet unit) fails it."""

from __future__ import annotations

from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet.verify.checks import unplanned_router_workers
from pdfleet.verify.targets import from_plan, from_urls


def test_a_worker_outside_the_plan_is_reported() -> None:
    target = from_plan(plan_inventory(REPO_ROOT / "inventory" / "sim"))
    planned = {w.url for w in target.workers}
    assert unplanned_router_workers(planned, target) == []
    stale = "http://10.77.0.11:30005"
    problems = unplanned_router_workers(planned | {stale}, target)
    assert len(problems) == 1 and problems[0].startswith(f"router lists worker(s) the plan does not name: {stale};")


def test_explicit_urls_are_not_held_to_a_plan() -> None:
    target = from_urls("http://r", ["http://p"], ["http://d"])
    assert unplanned_router_workers({"http://p", "http://d", "http://other"}, target) == []
