"""Read an Ansible YAML inventory (a directory or a file) the way the planner needs it.

Only what the model needs is read: the host names with their addresses (`ansible_host`) and the
variables of the `all` group (`group_vars/all.yml`, `group_vars/all/*.yml`, and `vars:` under `all`).
Vault-encrypted files hold secrets, never the model, and are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from pdfleet.errors import InventoryError

INVENTORY_FILES = ("hosts.yml", "hosts.yaml", "inventory.yml", "inventory.yaml")


@dataclass(frozen=True)
class Inventory:
    """Hosts (name -> address) and the merged `all` group variables of one inventory."""

    path: Path
    hosts: dict[str, str]
    variables: dict[str, object]
    host_vars: dict[str, dict[str, object]]


def _read_yaml(path: Path) -> object:
    text = path.read_text(encoding="utf-8")
    if text.startswith("$ANSIBLE_VAULT"):
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InventoryError(f"{path}: not valid YAML: {exc}") from None


def _walk_group(group: object, path: Path, hosts: dict[str, dict[str, object]]) -> None:
    if group is None:
        return
    if not isinstance(group, dict):
        raise InventoryError(f"{path}: a group must be a mapping with hosts/children/vars")
    for name, hvars in (group.get("hosts") or {}).items():
        merged = hosts.setdefault(str(name), {})
        merged.update(hvars or {})
    for child in (group.get("children") or {}).values():
        _walk_group(child, path, hosts)


def _find_inventory_file(path: Path) -> Path:
    if path.is_file():
        return path
    for name in INVENTORY_FILES:
        if (path / name).is_file():
            return path / name
    raise InventoryError(f"{path}: no inventory file found (expected one of {', '.join(INVENTORY_FILES)})")


def _group_vars(base: Path) -> dict[str, object]:
    merged: dict[str, object] = {}
    single = [base / "group_vars" / "all.yml", base / "group_vars" / "all.yaml"]
    folder = base / "group_vars" / "all"
    files = [p for p in single if p.is_file()]
    if folder.is_dir():
        files += sorted(p for p in folder.iterdir() if p.suffix in (".yml", ".yaml"))
    for f in files:
        data = _read_yaml(f)
        if data is None:
            continue
        if not isinstance(data, dict):
            raise InventoryError(f"{f}: group variables must be a mapping")
        merged.update(data)
    return merged


def load_inventory(path: str | Path) -> Inventory:
    """Load hosts and `all` variables; raise InventoryError naming the file on any problem."""
    path = Path(path)
    if not path.exists():
        raise InventoryError(f"{path}: inventory not found (pass -i with an inventory directory or file)")
    inv_file = _find_inventory_file(path)
    data = _read_yaml(inv_file)
    if not isinstance(data, dict) or "all" not in data:
        raise InventoryError(f"{inv_file}: a YAML inventory must start with an 'all' group")
    host_vars: dict[str, dict[str, object]] = {}
    _walk_group(data["all"], inv_file, host_vars)
    variables: dict[str, object] = dict((data["all"] or {}).get("vars") or {})
    variables.update(_group_vars(inv_file.parent))
    hosts = {name: str(hv.get("ansible_host", name)) for name, hv in host_vars.items()}
    return Inventory(path=path, hosts=hosts, variables=variables, host_vars=host_vars)
