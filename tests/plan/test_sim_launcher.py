"""The sim inventories' workers launch the stand-in of the separate pdfleet-sim distribution
(``python -m pdfleet_sim.worker``, what the sim hosts get from its wheel); production inventories launch SGLang."""

from __future__ import annotations

import importlib.util

import pytest
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT


@pytest.mark.parametrize(("name", "module"), [("sim", "pdfleet_sim.worker"), ("sim-mono", "pdfleet_sim.worker"),
                                              ("sim-fleet", "pdfleet_sim.worker"),
                                              ("examples/pd-4p4d", "sglang.launch_server")])
def test_workers_launch_the_module_of_their_launcher(name: str, module: str) -> None:
    plan = plan_inventory(REPO_ROOT / "inventory" / name)
    workers = [u for units in plan.hosts.values() for u in units if u.kind == "worker"]
    assert workers
    for u in workers:
        assert f"/bin/python -m {module} " in u.exec_start_line, f"{name}: {u.name}: {u.exec_start_line}"


def test_the_sim_launcher_module_is_runnable() -> None:
    """The module string names a package with a __main__ (python -m runs it), in pdfleet-sim, not in pdfleet."""
    spec = importlib.util.find_spec("pdfleet_sim.worker.__main__")
    assert spec is not None and spec.origin is not None
    assert "/scripts/sim/pdfleet_sim/worker/" in spec.origin or "/site-packages/pdfleet_sim/worker/" in spec.origin
