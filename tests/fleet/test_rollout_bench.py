"""The rollout's regression benchmark stores the baseline taken before the first host and compares the one
after the last with it (the protocol's tolerances); a benchmark that lost requests is never stored. The load
itself is replaced by fixed figures here (the comparison, not the load, is under test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pdfleet.rollout import bench as rollout_bench
from pdfleet.verify import bench


def _figures(monkeypatch: pytest.MonkeyPatch, throughput: float, completed: int = 32) -> None:
    async def fake(url: str, model: str, s: Any) -> dict[str, Any]:
        return {"requests": 32, "completed": completed, "errors": [] if completed == 32 else ["HTTP 503"],
                "output_throughput": throughput, "median_ttft_ms": 100.0, "median_tpot_ms": 10.0}

    monkeypatch.setattr(bench, "pdfleet_load", fake)


def test_baseline_before_then_comparison_after(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = tmp_path / "baseline.json"
    _figures(monkeypatch, 500.0)
    before = rollout_bench.run("http://router", "m", base, save=True)
    assert before["status"] == "no-baseline" and before["stored"]
    assert json.loads(base.read_text())["rollout"]["result"]["output_throughput"] == 500.0

    _figures(monkeypatch, 480.0)
    assert rollout_bench.run("http://router", "m", base, save=False)["status"] == "pass"
    _figures(monkeypatch, 300.0)  # -40 %: past the 10 % tolerance
    after = rollout_bench.run("http://router", "m", base, save=False)
    assert after["status"] == "fail" and "throughput" in after["summary"] + " ".join(after["failures"])


def test_a_benchmark_that_lost_requests_is_not_the_baseline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = tmp_path / "baseline.json"
    _figures(monkeypatch, 500.0, completed=20)
    out = rollout_bench.run("http://router", "m", base, save=True)
    assert out["status"] == "fail" and not out["stored"] and not base.exists()
