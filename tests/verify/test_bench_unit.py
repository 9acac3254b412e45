"""Baseline storage and comparison, and the bench_serving adapter."""

from __future__ import annotations

import json
from pathlib import Path

from pdfleet.verify.bench import (
    baseline_key,
    bench_check,
    compare,
    load_shape,
    parse_bench_serving,
    sglang_command,
    store_if_passed,
)
from pdfleet.verify.settings import Settings

RESULT = {"completed": 8, "requests": 8, "duration_s": 1.0, "output_throughput": 100.0, "request_throughput": 8.0,
          "median_ttft_ms": 80.0, "median_tpot_ms": 25.0, "errors": []}


def test_no_baseline_then_save_then_compare(tmp_path: Path) -> None:
    s = Settings(baseline_file=tmp_path / "b.json")
    first = bench_check(dict(RESULT), None, "pd-4p4d", s, {"sglang": "x"}, 1.0)
    assert first.status == "no-baseline" and "not a failure" in first.summary
    assert not (tmp_path / "b.json").exists(), "nothing is stored before the verdict is known"
    assert "stored" in (store_if_passed("pass", first, s) or "")
    assert json.loads((tmp_path / "b.json").read_text())["pd-4p4d"]["load"] == load_shape(s)
    same = bench_check(dict(RESULT), None, "pd-4p4d", s, {}, 1.0)
    assert same.status == "pass"
    slow = bench_check({**RESULT, "output_throughput": 80.0, "median_tpot_ms": 40.0}, None, "pd-4p4d", s, {}, 1.0)
    assert slow.status == "fail" and len(slow.failures) == 2
    other_profile = bench_check(dict(RESULT), None, "mono-tp8", s, {}, 1.0)
    assert other_profile.status == "no-baseline"


def test_only_a_passing_run_becomes_the_baseline(tmp_path: Path) -> None:
    """Issue 11 item 5: the first passing run stores its benchmark; a failed or regressed run never does."""
    s = Settings(baseline_file=tmp_path / "b.json")
    first = bench_check(dict(RESULT), None, "k", s, {}, 1.0)
    assert store_if_passed("fail", first, s) is None and store_if_passed("incomplete", first, s) is None
    assert not (tmp_path / "b.json").exists()
    store_if_passed("pass", first, s)
    s.save_baseline = True  # even when asked to replace it
    regressed = bench_check({**RESULT, "output_throughput": 50.0}, None, "k", s, {}, 1.0)
    assert regressed.status == "fail"
    assert store_if_passed("fail", regressed, s) is None
    assert json.loads((tmp_path / "b.json").read_text())["k"]["result"]["output_throughput"] == 100.0
    better = bench_check({**RESULT, "output_throughput": 120.0}, None, "k", s, {}, 1.0)
    assert store_if_passed("pass", better, s)
    assert json.loads((tmp_path / "b.json").read_text())["k"]["result"]["output_throughput"] == 120.0
    s.save_baseline = False  # a later passing run compares, it does not replace
    later = bench_check({**RESULT, "output_throughput": 119.0}, None, "k", s, {}, 1.0)
    assert later.status == "pass" and store_if_passed("pass", later, s) is None


def test_baseline_key_is_profile_version_and_plan() -> None:
    workers = [{"name": "prefill", "role": "prefill", "url": "http://127.0.0.1:4001", "tp": 4, "host": None}]
    a = baseline_key({"profile": "explicit", "sglang_version": "0.5.23", "workers": workers, "model": "m"})
    moved = [{**workers[0], "url": "http://127.0.0.1:5001"}]  # ephemeral ports do not change the key
    assert a == baseline_key({"profile": "explicit", "sglang_version": "0.5.23", "workers": moved, "model": "m"})
    assert a.startswith("explicit sglang=0.5.23 plan=")
    assert a != baseline_key({"profile": "explicit", "sglang_version": "0.5.15.post1", "workers": workers,
                              "model": "m"})
    assert baseline_key({"profile": "p", "sglang_version": "v", "plan": {"x": 1}}) != \
        baseline_key({"profile": "p", "sglang_version": "v", "plan": {"x": 2}})


def test_baseline_file_location_is_configurable(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PDFLEET_BASELINE_FILE", str(tmp_path / "kept.json"))
    assert Settings().baseline_file == tmp_path / "kept.json"


def test_other_load_shape_is_not_compared(tmp_path: Path) -> None:
    s = Settings(baseline_file=tmp_path / "b.json")
    store_if_passed("pass", bench_check(dict(RESULT), None, "p", s, {}, 1.0), s)
    s2 = Settings(baseline_file=tmp_path / "b.json", bench_requests=999)
    assert bench_check(dict(RESULT), None, "p", s2, {}, 1.0).status == "no-baseline"


def test_tolerance_edges() -> None:
    s = Settings()
    base = {"result": {"output_throughput": 100.0, "median_ttft_ms": 100.0, "median_tpot_ms": 100.0}}
    ok, limits = compare({"output_throughput": 90.0, "median_ttft_ms": 125.0, "median_tpot_ms": 115.0}, base, s)
    assert ok == [] and limits == {"output_throughput_min": 90.0, "median_ttft_ms_max": 125.0,
                                   "median_tpot_ms_max": 115.0}
    bad, _ = compare({"output_throughput": 89.9, "median_ttft_ms": 125.1, "median_tpot_ms": None}, base, s)
    assert len(bad) == 3


def test_incomplete_load_and_error() -> None:
    s = Settings()
    assert bench_check({**RESULT, "completed": 7}, None, "p", s, {}, 1.0).status == "fail"
    assert bench_check(None, "boom", "p", s, {}, 1.0).status == "error"


def test_bench_serving_adapter(tmp_path: Path) -> None:
    line = json.dumps({"completed": 500, "num_prompts": 500, "duration": 50.0, "output_throughput": 2560.0,
                       "request_throughput": 10.0, "median_ttft_ms": 300.0, "median_tpot_ms": 20.0})
    parsed = parse_bench_serving("noise\n" + line + "\n")
    assert parsed["output_throughput"] == 2560.0 and parsed["requests"] == 500
    cmd = sglang_command("http://r:8000", Settings(bench_python="/v/bin/python", bench_tokenizer="/tok"),
                         tmp_path / "o.jsonl")
    assert cmd[:3] == ["/v/bin/python", "-m", "sglang.bench_serving"]
    assert cmd[cmd.index("--dataset-name") + 1] == "random-ids"
    assert cmd[cmd.index("--tokenizer") + 1] == "/tok"


def test_fleet_baseline_key_is_not_a_single_pairs_and_not_the_checkouts() -> None:
    from pdfleet.inventory_plan import plan_inventory
    from pdfleet.paths import REPO_ROOT
    from pdfleet.verify.targets import from_plan

    examples = REPO_ROOT / "inventory" / "examples"
    one = from_plan(plan_inventory(examples / "pd-4p4d")).summary()
    fleet = from_plan(plan_inventory(examples / "pd-fleet")).summary()
    assert baseline_key(one) != baseline_key(fleet)  # a three-pair fleet never compares with one pair's numbers
    moved = {**one, "plan": {**one["plan"], "paths": {"repo": "/elsewhere"}}}
    assert baseline_key(moved) == baseline_key(one)  # where the bundle is checked out is not part of the plan


def test_latency_samples_go_to_detail_not_measured(tmp_path: Path) -> None:
    """pdfleet's own load hands back every request's latencies: the check keeps them in ``detail`` (the report
    page's latency distribution), out of ``measured`` (which failure messages print) and out of the baseline."""
    s = Settings(baseline_file=tmp_path / "b.json")
    samples = {"ttft_ms": [70.0, 80.0, 90.0], "tpot_ms": [24.0, 25.0], "e2e_s": [1.5, 1.6]}
    first = bench_check({**RESULT, "latency_samples": samples}, None, "k", s, {"sglang": "x"}, 1.0)
    assert first.detail == {"versions": {"sglang": "x"}, "latency_samples": samples}
    assert "latency_samples" not in first.measured
    store_if_passed("pass", first, s)
    assert "latency_samples" not in json.dumps(json.loads((tmp_path / "b.json").read_text()))
    lost = bench_check({**RESULT, "completed": 7, "latency_samples": samples}, None, "k", s, {}, 1.0)
    assert lost.status == "fail" and lost.detail == {"latency_samples": samples}
