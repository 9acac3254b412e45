"""The prefill hold-down: derived from the decodes' heartbeat, and refused when an inventory sets it too short."""

from __future__ import annotations

import copy

import pytest
import yaml
from pdfleet.errors import PlanError
from pdfleet.planner import build_plan
from plan_support import EXAMPLES

BASE = yaml.safe_load((EXAMPLES / "pd-4p4d" / "group_vars" / "all" / "cluster.yml").read_text())["pdfleet_cluster"]
HOSTS = {"gpu01": "192.0.2.10"}


def _plan(**sections: dict) -> dict[str, dict]:
    raw = copy.deepcopy(BASE)
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    plan = build_plan(raw, HOSTS, {raw["sglang"]["version"]: raw["sglang"]["patch"]})
    return {u.instance: {"hold": u.start_hold_down_s, "env": u.environment} for u in plan.units()}


def test_default_hold_down_is_sglangs_heartbeat_window() -> None:
    units = _plan()
    assert units["prefill0"]["hold"] == 15  # 5 s x (2 failures + 1 margin)
    assert units["decode0"]["hold"] == 0 and units["router"]["hold"] == 0
    assert units["decode0"]["env"]["SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL"] == "5"
    assert units["decode0"]["env"]["SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE"] == "2"


def test_hold_down_follows_the_heartbeat_settings() -> None:
    units = _plan(nixl={"heartbeat_interval_s": 2, "heartbeat_max_failures": 3})
    assert units["prefill0"]["hold"] == 8
    assert units["decode0"]["env"]["SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE"] == "3"


def test_explicit_hold_down_at_the_window_passes_and_below_fails() -> None:
    assert _plan(service={"prefill_hold_down_s": 20})["prefill0"]["hold"] == 20
    with pytest.raises(PlanError) as err:
        _plan(service={"prefill_hold_down_s": 14})
    text = str(err.value)
    assert "pdfleet_cluster.service.prefill_hold_down_s" in text and "set it to at least 15" in text
