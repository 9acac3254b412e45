"""The rollout's regression benchmark stores the baseline taken before the first host and compares the one
after the last with it (the protocol's tolerances); a regression is measured once more and counts only when
it is there again; a benchmark that lost requests is never stored nor measured again. The load
itself is replaced by fixed figures here (the comparison, not the load, is under test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pdfleet.rollout import bench as rollout_bench
from pdfleet.verify import bench


def _figures(monkeypatch: pytest.MonkeyPatch, *throughputs: float, completed: int = 32) -> list[float]:
    """Each benchmark run measures the next throughput; returns the list still to come."""
    left = list(throughputs)

    async def fake(url: str, model: str, s: Any) -> dict[str, Any]:
        return {"requests": 32, "completed": completed, "errors": [] if completed == 32 else ["HTTP 503"],
                "output_throughput": left.pop(0), "median_ttft_ms": 100.0, "median_tpot_ms": 10.0}

    monkeypatch.setattr(bench, "pdfleet_load", fake)
    return left


def test_baseline_before_then_comparison_after(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = tmp_path / "baseline.json"
    _figures(monkeypatch, 500.0)
    before = rollout_bench.run("http://router", "m", base, save=True)
    assert before["status"] == "no-baseline" and before["stored"]
    assert json.loads(base.read_text())["rollout"]["result"]["output_throughput"] == 500.0

    _figures(monkeypatch, 480.0)
    assert rollout_bench.run("http://router", "m", base, save=False)["status"] == "pass"
    left = _figures(monkeypatch, 300.0, 290.0)  # -40 %: past the 10 % tolerance, in both runs
    after = rollout_bench.run("http://router", "m", base, save=False)
    assert after["status"] == "fail" and "throughput" in " ".join(after["failures"]) and not left
    assert after["first_attempt"]["status"] == "fail"


def test_a_regression_seen_once_is_measured_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = tmp_path / "baseline.json"
    _figures(monkeypatch, 500.0)
    rollout_bench.run("http://router", "m", base, save=True)
    left = _figures(monkeypatch, 300.0, 495.0)  # one slow run under live traffic, then as before
    out = rollout_bench.run("http://router", "m", base, save=False)
    assert out["status"] == "pass" and out["first_attempt"]["status"] == "fail" and not left
    left = _figures(monkeypatch, 300.0, 495.0)
    assert rollout_bench.run("http://router", "m", base, save=False, confirm=False)["status"] == "fail"
    assert left == [495.0]


def test_a_benchmark_that_lost_requests_is_not_the_baseline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = tmp_path / "baseline.json"
    left = _figures(monkeypatch, 500.0, 500.0, completed=20)
    out = rollout_bench.run("http://router", "m", base, save=True)
    assert out["status"] == "fail" and not out["stored"] and not base.exists() and left == [500.0]
