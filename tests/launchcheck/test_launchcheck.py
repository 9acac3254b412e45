"""The launch check: every example launch line parsed by the pinned SGLang's (and router's) own parser, a bad flag
failing naming the unit and the flag, and the committed effective settings re-resolved by SGLang itself."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from pdfleet import cli
from pdfleet.launchcheck import check, store
from pdfleet.patch import runtime
from pdfleet.paths import REPO_ROOT

EXAMPLE = "inventory/examples/pd-4p4d"


@pytest.fixture(scope="module")
def sglang_runtime() -> runtime.Runtime:
    return runtime.ensure_runtime()


def _bad_inventory(tmp: Path) -> Path:
    """pd-4p4d with an unknown flag on decode0, an invalid choice on prefill0, an unknown flag on the router."""
    inv = tmp / "bad-inventory"
    shutil.copytree(REPO_ROOT / EXAMPLE, inv)
    path = inv / "group_vars" / "all" / "cluster.yml"
    doc = yaml.safe_load(path.read_text())
    cluster = doc["pdfleet_cluster"]
    by_name = {i["name"]: i for i in cluster["instances"]}
    by_name["decode0"]["extra_args"] = ["--no-such-flag"]
    by_name["prefill0"]["extra_args"] = ["--attention-backend", "warpdrive"]
    cluster["router"]["extra_args"] = ["--no-such-router-flag"]
    path.write_text(yaml.safe_dump(doc))
    return inv


@pytest.fixture(scope="module")
def parsed(sglang_runtime: runtime.Runtime, tmp_path_factory: pytest.TempPathFactory) -> check.Report:
    """Every example inventory and the bad one, at every pin: parse only, one runtime process per pin."""
    bad = _bad_inventory(tmp_path_factory.mktemp("launchcheck"))
    plans = [(inv, check.plan_at(REPO_ROOT / inv, v)) for v in check.pins() for inv in check.EXAMPLE_INVENTORIES]
    plans += [("bad", check.plan_at(bad, v)) for v in check.pins()]
    return check.check_plans(plans, resolve=False)


def test_both_pins_are_checked(parsed: check.Report) -> None:
    assert {r.sglang for r in parsed.results} == {"0.5.15.post1", "0.5.23"}
    assert {r.inventory for r in parsed.results} == {*check.EXAMPLE_INVENTORIES, "bad"}


def test_every_example_launch_line_is_accepted_by_both_pins(parsed: check.Report) -> None:
    examples = [r for r in parsed.results if r.inventory != "bad"]
    assert {r.kind for r in examples} == {"worker", "router"}
    assert [r.problem() for r in examples if r.refused] == []


def test_an_unknown_flag_fails_naming_the_unit_and_the_flag(parsed: check.Report) -> None:
    for version in check.pins():
        bad = {r.unit: r for r in parsed.results if r.inventory == "bad" and r.sglang == version}
        assert "--no-such-flag" in bad["pdfleet-decode0"].refused
        problem = bad["pdfleet-decode0"].problem()
        assert "pdfleet-decode0" in problem and "gpu01" in problem and version in problem
        assert "--no-such-router-flag" in bad["pdfleet-router"].refused
        assert "router" in bad["pdfleet-router"].problem()


def test_an_invalid_choice_fails_naming_the_unit_and_the_flag(parsed: check.Report) -> None:
    for version in check.pins():
        prefill = next(r for r in parsed.results if r.inventory == "bad" and r.sglang == version
                       and r.unit == "pdfleet-prefill0")
        assert "--attention-backend" in prefill.refused and "invalid choice" in prefill.refused
        assert "warpdrive" in prefill.refused


def _env_inventory(tmp: Path) -> Path:
    """pd-4p4d whose PD workers carry SGLANG_OPT_FLASHMLA_SPARSE_PREFILL=1 (nixl.extra_env, which overrides the
    pin's SM120 facts)."""
    inv = tmp / "env-inventory"
    shutil.copytree(REPO_ROOT / EXAMPLE, inv)
    path = inv / "group_vars" / "all" / "cluster.yml"
    doc = yaml.safe_load(path.read_text())
    doc["pdfleet_cluster"]["nixl"]["extra_env"] = {"SGLANG_OPT_FLASHMLA_SPARSE_PREFILL": "1"}
    path.write_text(yaml.safe_dump(doc))
    return inv


def test_sglang_resolves_the_committed_settings_and_honours_the_units_env(sglang_runtime: runtime.Runtime,
                                                                           tmp_path: Path) -> None:
    """pd-4p4d at both pins resolved again by SGLang (the full set: the long test below), and the same
    inventory with the sparse-prefill switch in the units' environment (one runtime process per pin)."""
    plans = [(EXAMPLE, check.plan_at(REPO_ROOT / EXAMPLE, v)) for v in check.pins()]
    plans.append(("env", check.plan_at(_env_inventory(tmp_path), "0.5.15.post1")))
    report = check.check_plans(plans)
    assert report.problems == []
    fresh = {k: e for k, e in report.entries().items() if e["inventory"] == EXAMPLE}
    committed = store.committed()
    stale = [f"{e['inventory']} {e['sglang']} {e['unit']}" for k, e in fresh.items() if committed.get(k) != e]
    assert stale == [], f"stale {store.RESOLVED_FILE.name}: run {store.REGENERATE}"
    settings = {(e["inventory"], e["sglang"], e["unit"]): e["settings"] for e in report.entries().values()}
    # SGLang's own DeepSeek-V4 defaults on SM120, as the wheels resolve them.
    for s in settings.values():
        assert (s["attention_backend"], s["kv_cache_dtype"], s["page_size"]) == ("dsv4", "fp8_e4m3", 256)
        assert s["moe_runner_backend"] == "marlin"  # the inventory's flag, kept by both pins
    assert settings[(EXAMPLE, "0.5.23", "pdfleet-prefill0")]["sparse_prefill"] == "off"  # 0.5.23's SM120 guard
    # 0.5.15.post1 has no SM120 guard: the unit's env decides (the planner's SM120 facts set it to 0 on prefill),
    # and chunked prefill keeps extend batches under the size branch's threshold.
    prefill = settings[(EXAMPLE, "0.5.15.post1", "pdfleet-prefill0")]
    assert prefill["sparse_prefill"] == "off", prefill["sparse_prefill_reason"]
    assert "chunked_prefill_size=8192" in prefill["sparse_prefill_reason"]
    honoured = settings[("env", "0.5.15.post1", "pdfleet-prefill0")]
    assert honoured["sparse_prefill"] == "on", honoured["sparse_prefill_reason"]


@pytest.mark.long
def test_every_committed_setting_is_current(sglang_runtime: runtime.Runtime) -> None:
    report = check.check_inventories(check.EXAMPLE_INVENTORIES)
    assert report.problems == []
    assert report.entries() == store.committed(), f"stale {store.RESOLVED_FILE.name}: run {store.REGENERATE}"


def test_plan_shows_the_effective_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", "-i", str(REPO_ROOT / EXAMPLE)]) == 0
    out = capsys.readouterr().out
    section = out[out.index("effective settings"):]
    for word in ("pdfleet-prefill0", "pdfleet-decode0", "dsv4", "marlin", "fp8_e4m3", "256", "complete"):
        assert word in section
    assert "not resolved" not in section


def test_plan_of_an_unresolved_inventory_says_how_to_resolve(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    inv = _bad_inventory(tmp_path)
    assert cli.main(["plan", "-i", str(inv)]) == 0
    out = capsys.readouterr().out
    assert "not resolved for pdfleet-prefill0, pdfleet-decode0: run pdfleet launchcheck -i INVENTORY" in out
