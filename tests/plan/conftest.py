"""Fixtures for the planner tests: the shipped profiles and the malformed-inventory catalogue."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from pdfleet.paths import REPO_ROOT

# The shipped example inventories (inventory/examples/<name>), each with golden renders.
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


@pytest.fixture(params=CATALOGUE, ids=[c["name"] for c in CATALOGUE])
def malformed(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    base = yaml.safe_load((EXAMPLES / "pd-4p4d" / "group_vars" / "all" / "cluster.yml").read_text())
    cluster = apply_edits(base["pdfleet_cluster"], request.param)
    return write_inventory(tmp_path / request.param["name"], cluster), request.param["expect"]
