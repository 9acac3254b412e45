"""The planner applies the pin's SM120 facts (its patch manifest's `hardware` section) per role and host, and the
plan document, `pdfleet plan` and the rendered env files carry them; a pin that needs none sets none."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pdfleet import planner
from pdfleet.errors import PlanError
from pdfleet.patch import manifest as patches
from pdfleet.plandoc import plan_document
from pdfleet.render import render_plan
from plan_support import EXAMPLES

BASE = yaml.safe_load((EXAMPLES / "pd-4p4d" / "group_vars" / "all" / "cluster.yml").read_text())["pdfleet_cluster"]
HOSTS = {"gpu01": "192.0.2.10"}
PATCHES = {v: patches.load_manifest(v).patch_id for v in patches.supported_versions()}
SPARSE, BACKEND = "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL", "SGLANG_SM120_FLASHMLA_BACKEND"
REPO = Path(__file__).resolve().parents[2]


def _plan(version: str = "0.5.15.post1", **sections: dict | list) -> planner.Plan:
    raw = copy.deepcopy(BASE)
    raw["sglang"] |= {"version": version, "patch": PATCHES[version]}
    for name, values in sections.items():
        if isinstance(values, list):
            raw[name] = values
            continue
        target = raw.setdefault(name, {})
        for key, value in values.items():
            target[key] = target.get(key, {}) | value if isinstance(value, dict) else value
    return planner.build_plan(raw, HOSTS, PATCHES)


def _env(plan: planner.Plan) -> dict[str, dict[str, str]]:
    return {u.instance: u.environment for u in plan.units()}


def test_the_old_pin_sets_both_facts_on_the_right_roles() -> None:
    env = _env(_plan())
    assert env["prefill0"][SPARSE] == "0" and env["prefill0"][BACKEND] == "triton"
    assert SPARSE not in env["decode0"] and env["decode0"][BACKEND] == "triton"
    assert SPARSE not in env["router"] and BACKEND not in env["router"]


def test_the_plan_document_carries_each_fact_with_its_source() -> None:
    doc = plan_document(_plan())
    facts = {f["setting"]: f for f in doc["hardware_facts"]}
    assert set(facts) == {f"{SPARSE}=0", f"{BACKEND}=triton", "--chunked-prefill-size <= 11673"}
    sparse = facts[f"{SPARSE}=0"]
    assert sparse["units"] == ["pdfleet-prefill0"] and sparse["compute_capability"] == "12.0"
    assert sparse["file"] == "sglang/srt/layers/attention/deepseek_v4_backend.py"
    assert "_forward_prefill_sparse" in sparse["condition"] and "EnvBool(True)" in sparse["condition"]
    # the manifest as package data (pdfleet/...): the same string from a checkout and from an installed wheel
    assert sparse["manifest"] == "pdfleet/patches/0.5.15.post1/manifest.yml"
    assert facts[f"{BACKEND}=triton"]["units"] == ["pdfleet-prefill0", "pdfleet-decode0"]
    # the contexts Ansible renders from carry the env too
    ctx = {c["pdfleet_units_unit"]["instance"]: c["pdfleet_units_unit"] for c in doc["contexts"]["gpu01"]}
    assert ctx["prefill0"]["environment"][SPARSE] == "0"


def test_the_guarded_pin_sets_none() -> None:
    plan = _plan("0.5.23")
    assert plan.hardware_facts == []
    envs = _env(plan)
    assert {"prefill0", "decode0"} <= set(envs), sorted(envs)
    for env in envs.values():
        assert SPARSE not in env and BACKEND not in env


def test_other_gpus_get_nothing_and_extra_env_overrides() -> None:
    other = _plan(hosts={"gpu01": {"compute_capability": "9.0"}})
    assert other.hardware_facts == [] and all(BACKEND not in e for e in _env(other).values())
    chosen = _env(_plan(nixl={"extra_env": {BACKEND: "torch"}}))
    assert chosen["decode0"][BACKEND] == "torch" and chosen["prefill0"][SPARSE] == "0"


def test_mono_gets_the_prefill_fact_too() -> None:
    raw = yaml.safe_load((EXAMPLES / "mono-tp8" / "group_vars" / "all" / "cluster.yml").read_text())["pdfleet_cluster"]
    inv_hosts = {h: "192.0.2.10" for h in raw["hosts"]}
    plan = planner.build_plan(raw, inv_hosts, PATCHES)
    if raw["sglang"]["version"] != "0.5.15.post1":
        pytest.skip("the mono example is not on 0.5.15.post1")
    workers = [u for u in plan.units() if u.kind == "worker"]
    assert workers and all(u.environment[SPARSE] == "0" and u.environment[BACKEND] == "triton" for u in workers)


def test_flags_go_before_the_operators_args(monkeypatch: pytest.MonkeyPatch) -> None:
    fact = patches.FlagFact(args=("--chunked-prefill-size", "8192"), roles=("prefill",), file="f.py", condition="c")
    hw = patches.HardwareFacts("12.0", env=(), flags=(fact,), findings=())
    monkeypatch.setattr(planner, "hardware_facts", lambda version: {"12.0": hw})
    plan = _plan()
    argv = {u.instance: u.exec_start for u in plan.units()}
    at = argv["prefill0"].index("--chunked-prefill-size")
    assert argv["prefill0"][at + 1] == "8192" and at < argv["prefill0"].index("--trust-remote-code")
    assert "--chunked-prefill-size" not in argv["decode0"]
    assert plan.hardware_facts[0]["setting"] == "--chunked-prefill-size 8192"


def test_rendered_env_files_carry_the_facts(tmp_path: Path) -> None:
    render_plan(_plan(), tmp_path)
    assert f"{SPARSE}=0" in (tmp_path / "gpu01" / "pdfleet-prefill0.env").read_text()
    assert SPARSE not in (tmp_path / "gpu01" / "pdfleet-decode0.env").read_text()
    assert f"{BACKEND}=triton" in (tmp_path / "gpu01" / "pdfleet-decode0.env").read_text()


def test_pdfleet_plan_shows_the_facts_and_drops_them_for_the_guarded_pin(tmp_path: Path) -> None:
    def show(inventory: Path) -> str:
        proc = subprocess.run([sys.executable, "-m", "pdfleet.cli", "plan", "-i", str(inventory)],
                              capture_output=True, text=True, check=False, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    old = show(EXAMPLES / "pd-4p4d")
    assert f"env {SPARSE}=0 on pdfleet-prefill0  [sglang/srt/layers/attention/deepseek_v4_backend.py]" in old
    assert f"env {BACKEND}=triton on pdfleet-prefill0, pdfleet-decode0" in old
    inv = tmp_path / "pd-4p4d-0.5.23"
    shutil.copytree(EXAMPLES / "pd-4p4d", inv)
    cluster = inv / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(cluster.read_text())
    data["pdfleet_cluster"]["sglang"] |= {"version": "0.5.23", "patch": PATCHES["0.5.23"]}
    cluster.write_text(yaml.safe_dump(data))
    new = show(inv)
    assert SPARSE not in new and BACKEND not in new
    assert "compute capability 12.0: none needed" in new


def test_a_chunked_prefill_above_the_limit_is_refused_on_the_old_pin_only() -> None:
    def prefill_args(*args: str) -> dict:
        return {"instances": [dict(BASE["instances"][0], extra_args=list(args)), BASE["instances"][1]]}

    for args in (["--chunked-prefill-size", "16384"], ["--chunked-prefill-size=-1"], ["--chunked-prefill-size", "0"]):
        with pytest.raises(PlanError) as err:
            _plan(**prefill_args(*args))
        text = str(err.value)
        assert "pdfleet_cluster.instances[0].extra_args: --chunked-prefill-size" in text and "prefill0" in text
        assert "between 1 and 11673" in text and "deepseek_v4_backend.py" in text
        _plan("0.5.23", **prefill_args(*args))  # the guarded pin takes it
    assert _plan(**prefill_args("--chunked-prefill-size", "11673")).hardware_facts
    raw = copy.deepcopy(BASE)
    raw["model"]["server_args"] = [*raw["model"]["server_args"], "--chunked-prefill-size", "16384"]
    with pytest.raises(PlanError, match=r"pdfleet_cluster\.model\.server_args: --chunked-prefill-size 16384 on "
                       "prefill0"):
        planner.build_plan(raw, HOSTS, PATCHES)
