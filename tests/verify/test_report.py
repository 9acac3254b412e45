from __future__ import annotations

import json
from pathlib import Path

import pytest
from pdfleet.verify.report import Report, verdict_of
from pdfleet.verify.result import CheckResult


def _c(name: str, status: str) -> CheckResult:
    return CheckResult(name, status, f"{name} {status}", {"v": 1}, {"t": 2}, ["x"] if status == "fail" else [])


@pytest.mark.parametrize(("statuses", "verdict"), [
    (["pass", "pass"], "pass"),
    (["pass", "skipped", "no-baseline"], "pass"),
    (["pass", "inconclusive"], "inconclusive"),
    (["pass", "error"], "inconclusive"),
    (["pass", "deferred"], "inconclusive"),
    (["inconclusive", "fail"], "fail"),
    (["error", "fail", "pass"], "fail"),
])
def test_verdict_rule(statuses: list[str], verdict: str) -> None:
    assert verdict_of([_c(f"c{i}", s) for i, s in enumerate(statuses)]) == verdict


def test_report_roundtrip_and_exit_codes(tmp_path: Path) -> None:
    r = Report(target={"router": "http://127.0.0.1:1", "profile": "p"}, settings={}, started_epoch=1.0,
               checks=[_c("config", "pass"), _c("logs", "deferred")])
    assert r.exit_code == 2
    path = tmp_path / "r.json"
    r.write(path)
    again = Report.from_dict(json.loads(path.read_text()))
    again.replace(_c("logs", "fail"))
    d = again.to_dict()
    assert d["exit_code"] == 1 and d["ok"] is False and d["verdict"] == "fail"
    assert [f["check"] for f in d["failures"]] == ["logs"]
    assert d["failures"][0]["measured"] == {"v": 1} and d["failures"][0]["thresholds"] == {"t": 2}
    assert "VERDICT: FAIL (exit 1)" in again.table()


def test_protocol_error_is_inconclusive() -> None:
    r = Report(target={}, settings={}, started_epoch=0.0, error="router unreachable")
    assert r.verdict == "inconclusive" and r.exit_code == 2
    assert r.to_dict()["failures"][0]["check"] == "protocol"


def test_from_dict_rejects_other_json() -> None:
    with pytest.raises(ValueError, match="schema"):
        Report.from_dict({"checks": []})


FULL = ["config", "liveness", "cascade", "recovery", "logs", "bench"]
DEFAULTS = {"cycles": 2, "min_abort_events": 1}


@pytest.mark.parametrize(("settings", "statuses", "missing"), [
    ({**DEFAULTS, "skip": ["logs"]}, {"logs": "skipped"}, "logs"),
    ({**DEFAULTS, "skip": ["cascade"]}, {"cascade": "skipped"}, "cascade"),
    ({**DEFAULTS, "cycles": 0}, {}, "cycles"),
    ({**DEFAULTS, "min_abort_events": 0}, {}, "min_abort_events"),
    (DEFAULTS, {"cascade": None}, "cascade"),  # a report without a cascade at all
])
def test_missing_evidence_is_incomplete_unless_allowed(settings: dict, statuses: dict, missing: str) -> None:
    """Issue 11 item 4: no PASS without the evidence the protocol exists for."""
    checks = [_c(n, statuses.get(n, "pass")) for n in FULL if statuses.get(n, "pass") is not None]
    r = Report(target={}, settings=dict(settings), started_epoch=0.0, checks=checks)
    assert r.verdict == "incomplete" and r.exit_code == 2 and r.to_dict()["ok"] is False
    assert any(m.startswith(missing) for m in r.to_dict()["missing_evidence"])
    assert "INCOMPLETE" in r.table() and "VERDICT: INCOMPLETE (exit 2)" in r.table()
    r.settings["allow_incomplete"] = True
    d = r.to_dict()
    assert d["verdict"] == "pass" and d["exit_code"] == 0 and d["incomplete_allowed"] is True
    assert any("--allow-incomplete" in n and missing in n for n in d["notes"])


def test_complete_run_passes() -> None:
    r = Report(target={}, settings=dict(DEFAULTS), started_epoch=0.0, checks=[_c(n, "pass") for n in FULL])
    assert r.verdict == "pass" and r.to_dict()["missing_evidence"] == []


def test_a_failure_outranks_missing_evidence() -> None:
    r = Report(target={}, settings={**DEFAULTS, "cycles": 0}, started_epoch=0.0,
               checks=[_c("config", "fail"), _c("logs", "pass")])
    assert r.verdict == "fail" and r.exit_code == 1
