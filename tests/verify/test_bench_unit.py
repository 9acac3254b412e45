"""Baseline storage and comparison, and the bench_serving adapter."""

from __future__ import annotations

import json
from pathlib import Path

from pdfleet.verify.bench import bench_check, compare, load_shape, parse_bench_serving, sglang_command
from pdfleet.verify.settings import Settings

RESULT = {"completed": 8, "requests": 8, "duration_s": 1.0, "output_throughput": 100.0, "request_throughput": 8.0,
          "median_ttft_ms": 80.0, "median_tpot_ms": 25.0, "errors": []}


def test_no_baseline_then_save_then_compare(tmp_path: Path) -> None:
    s = Settings(baseline_file=tmp_path / "b.json")
    first = bench_check(dict(RESULT), None, "pd-4p4d", s, {}, 1.0)
    assert first.status == "no-baseline" and "not a failure" in first.summary
    s.save_baseline = True
    saved = bench_check(dict(RESULT), None, "pd-4p4d", s, {"sglang": "x"}, 1.0)
    assert saved.status == "no-baseline" and "saved" in saved.summary
    assert json.loads((tmp_path / "b.json").read_text())["pd-4p4d"]["load"] == load_shape(s)
    s.save_baseline = False
    same = bench_check(dict(RESULT), None, "pd-4p4d", s, {}, 1.0)
    assert same.status == "pass"
    slow = bench_check({**RESULT, "output_throughput": 80.0, "median_tpot_ms": 40.0}, None, "pd-4p4d", s, {}, 1.0)
    assert slow.status == "fail" and len(slow.failures) == 2
    other_profile = bench_check(dict(RESULT), None, "mono-tp8", s, {}, 1.0)
    assert other_profile.status == "no-baseline"


def test_other_load_shape_is_not_compared(tmp_path: Path) -> None:
    s = Settings(baseline_file=tmp_path / "b.json", save_baseline=True)
    bench_check(dict(RESULT), None, "p", s, {}, 1.0)
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


def test_fleet_baseline_key_counts_the_pairs() -> None:
    from pdfleet.cluster import plan_inventory
    from pdfleet.paths import REPO_ROOT
    from pdfleet.verify.targets import from_plan

    examples = REPO_ROOT / "inventory" / "examples"
    assert from_plan(plan_inventory(examples / "pd-4p4d")).baseline_key == "pd-4p4d"  # unchanged for one pair
    assert from_plan(plan_inventory(examples / "pd-fleet")).baseline_key == "pd-4p4d (3p+3d)"
    assert from_plan(plan_inventory(examples / "pd-multinode")).baseline_key == "pd-multinode (2p+1d)"

