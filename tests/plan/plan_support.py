"""Helpers of the planner tests (the shipped profiles, the malformed-inventory catalogue), importable by name.

A module with a unique name, not ``conftest``: ``pytest tests/plan tests/sglang`` in one call would otherwise
import the other directory's ``conftest`` for ``from conftest import``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from pdfleet.paths import REPO_ROOT

PROFILES = ("pd-4p4d", "pd-multinode", "mono-tp8", "pd-fleet")
EXAMPLES = REPO_ROOT / "inventory" / "examples"
CATALOGUE = yaml.safe_load((Path(__file__).parent / "malformed.yml").read_text())


def _walk(obj: object, dotted: str) -> tuple[object, object]:
    *parents, last = dotted.split(".")
    for part in parents:
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj, int(last) if isinstance(obj, list) else last


def apply_edits(cluster: dict, case: dict) -> dict:
    out = copy.deepcopy(cluster)
    for dotted, value in (case.get("set") or {}).items():
        parent, key = _walk(out, dotted)
        parent[key] = value
    for dotted in case.get("delete") or []:
        parent, key = _walk(out, dotted)
        del parent[key]
    return out


def write_inventory(root: Path, cluster: dict) -> Path:
    """An inventory whose only host points at a closed loopback port: nothing can be touched."""
    hosts = {"all": {"children": {"pdfleet_hosts": {"hosts": {
        "gpu01": {"ansible_host": "127.0.0.1", "ansible_port": 1}}}}}}
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (root / "group_vars" / "all" / "cluster.yml").write_text(yaml.safe_dump({"pdfleet_cluster": cluster}))
    return root
