"""Glue between an inventory on disk and the planner: the one call the CLI and tests use."""

from __future__ import annotations

from pathlib import Path

from pdfleet import patches
from pdfleet.errors import InventoryError
from pdfleet.inventory import load_inventory
from pdfleet.model import ROOT_VARIABLE
from pdfleet.paths import PATCH_DIR
from pdfleet.planner import Plan, build_plan


def supported_patches(patch_dir: Path = PATCH_DIR) -> dict[str, str]:
    """SGLang version -> patch id, from the patch series' manifests."""
    return {v: patches.load_manifest(v, patch_dir).patch_id for v in patches.supported_versions(patch_dir)}


def plan_inventory(path: str | Path) -> Plan:
    """Load the inventory at `path` and plan it; raises InventoryError or PlanError."""
    inv = load_inventory(path)
    if ROOT_VARIABLE not in inv.variables:
        raise InventoryError(
            f"{inv.path}: the variable {ROOT_VARIABLE} is not defined "
            f"(put the cluster model in {inv.path}/group_vars/all/cluster.yml)"
        )
    return build_plan(inv.variables[ROOT_VARIABLE], inv.hosts, supported_patches(), source=str(inv.path))
