"""Fixtures for the planner tests (the helpers live in ``plan_support``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from plan_support import CATALOGUE, EXAMPLES, apply_edits, write_inventory


@pytest.fixture(params=CATALOGUE, ids=[c["name"] for c in CATALOGUE])
def malformed(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    base = yaml.safe_load((EXAMPLES / "pd-4p4d" / "group_vars" / "all" / "cluster.yml").read_text())
    cluster = apply_edits(base["pdfleet_cluster"], request.param)
    return write_inventory(tmp_path / request.param["name"], cluster), request.param["expect"]
