"""From an inventory to a plan: load it with ansible-core, plan it (the one call the CLI and tests use)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pdfleet.errors import InventoryError
from pdfleet.inventory import ROOT_VARIABLE, Inventory, InventorySource, load_inventory
from pdfleet.patch import manifest as patches
from pdfleet.paths import PATCH_DIR
from pdfleet.planner import Plan, build_plan


def supported_patches(patch_dir: Path = PATCH_DIR) -> dict[str, str]:
    """SGLang version -> patch id, from the patch series' manifests."""
    return {v: patches.load_manifest(v, patch_dir).patch_id for v in patches.supported_versions(patch_dir)}


def plan_of(inv: Inventory) -> Plan:
    """Plan a loaded inventory; raises InventoryError or PlanError."""
    cluster = inv.shared_var(ROOT_VARIABLE)
    if cluster is None:
        raise InventoryError(
            f"{inv.source.describe()}: the variable {ROOT_VARIABLE} is not defined "
            f"(put the cluster model in {inv.path}/group_vars/all/cluster.yml)"
        )
    return build_plan(cluster, inv.hosts, supported_patches(), source=inv.source.describe())


def plan_inventory(source: InventorySource | str | Path | Sequence[str | Path]) -> Plan:
    """Load the inventory (ansible-core: host_vars, any group, -e, Vault) and plan it."""
    return plan_of(load_inventory(source))
