"""The model's hub revision is a commit (issue 30 item 6): a branch or tag name moves, so a later download could bring
other weights and other model code (which the workers run with --trust-remote-code). The planner refuses it for
`source: hub`, naming the field, the value and both ways out; `model.allow_branch_revision: true` accepts a moving
name explicitly; mirror and stand-in sources download nothing and are not asked."""

from __future__ import annotations

import copy

import pytest
import yaml
from pdfleet.errors import PlanError
from pdfleet.inventory_plan import supported_patches
from pdfleet.planner import build_plan
from plan_support import EXAMPLES

BASE = yaml.safe_load((EXAMPLES / "pd-4p4d" / "group_vars" / "all" / "cluster.yml").read_text())["pdfleet_cluster"]
HOSTS = {"gpu01": "127.0.0.1"}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _model(**model: object) -> dict:
    cluster = copy.deepcopy(BASE)
    cluster["model"] = {k: v for k, v in {**cluster["model"], **model}.items() if v is not None}
    return cluster


def _plan(cluster: dict) -> object:
    return build_plan(cluster, HOSTS, supported_patches(), source="test")


def _refusal(cluster: dict) -> str:
    with pytest.raises(PlanError) as err:
        _plan(cluster)
    lines = [ln for ln in str(err.value).splitlines() if "pdfleet_cluster.model.revision" in ln]
    assert len(lines) == 1, str(err.value)
    return lines[0]


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", COMMIT.upper(), COMMIT[:12], COMMIT + "0", ""])
def test_a_branch_tag_or_short_hash_is_refused_naming_the_field_the_value_and_the_fix(revision: str) -> None:
    line = _refusal(_model(revision=revision))
    assert f"{revision!r}" in line and "is not a commit hash" in line, line
    assert "40-hex commit you validated" in line and "pdfleet_cluster.model.allow_branch_revision: true" in line, line


def test_an_unset_revision_is_the_branch_main_and_refused_as_the_default() -> None:
    cluster = _model()
    del cluster["model"]["revision"]
    line = _refusal(cluster)
    assert "'main' (the default) is not a commit hash" in line, line


def test_a_commit_is_accepted_and_reaches_the_plan() -> None:
    plan = _plan(_model(revision=COMMIT))
    assert plan.model["revision"] == COMMIT and plan.model["allow_branch_revision"] is False


@pytest.mark.parametrize("revision", ["main", "v1.0", None])
def test_allow_branch_revision_accepts_a_moving_name_explicitly(revision: str | None) -> None:
    plan = _plan(_model(revision=revision, allow_branch_revision=True))
    assert plan.model["revision"] == (revision or "main") and plan.model["allow_branch_revision"] is True


def test_a_source_that_downloads_nothing_is_not_asked_for_a_commit() -> None:
    _plan(_model(revision="main", source="mirror", mirror_path="/srv/mirror/dsv4"))
    standin = _model(revision="main", source="standin")
    standin["sglang"] = {**standin["sglang"], "launcher": "sim"}
    _plan(standin)


def test_the_allow_flag_is_a_boolean() -> None:
    with pytest.raises(PlanError, match=r"pdfleet_cluster.model.allow_branch_revision: expected bool"):
        _plan(_model(revision="main", allow_branch_revision="yes"))


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()))
def test_every_example_pins_a_commit(example: str) -> None:
    """The examples are what operators copy: each pins a commit and does not switch the rule off."""
    model = yaml.safe_load((EXAMPLES / example / "group_vars" / "all" / "cluster.yml").read_text())[
        "pdfleet_cluster"]["model"]
    assert model.get("source", "hub") == "hub" and "allow_branch_revision" not in model
    assert len(str(model["revision"])) == 40 and int(str(model["revision"]), 16) >= 0


def test_the_sim_inventories_use_the_stand_in_and_need_no_commit() -> None:
    root = EXAMPLES.parent
    for name in ("sim", "sim-mono", "sim-fleet"):
        model = yaml.safe_load((root / name / "group_vars" / "all" / "cluster.yml").read_text())[
            "pdfleet_cluster"]["model"]
        assert model["source"] == "standin", name
        assert "revision" not in model, name
