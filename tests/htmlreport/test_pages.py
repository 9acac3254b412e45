"""The report pages (pdfleet.htmlreport; issue 28 item 4): self-contained (no script, nothing fetched), every
report string escaped, and what a real run recorded drawn where a headless browser builds it.

Fixtures (tests/htmlreport/fixtures), copied unchanged from real runs on the simulated cluster:
``verify-pass.json`` is the report of a `make site` verify stage (reports/verify-*.json); the others are from
one run of the fleet scenario (tests/scenario): ``rollout-fleet-ok.json`` its step-a patch rollout with
``rollout-fleet-ok-client-load.json`` the client load it ran alongside (tests/fleet/loadgen.py outcomes),
``rollout-fleet-failed.json`` its step-b rollout whose second host failed its gate, and ``gate-failed.json`` that
host's isolated gate (a verification report with a FAIL verdict inside). They predate the pairing and latency
samples, so those are drawn from a hand-made report below.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pdfleet.htmlreport import page_path, write_rollout_page, write_verify_page
from pdfleet.htmlreport.rollout_page import render as render_rollout
from pdfleet.htmlreport.verify_page import render as render_verify
from pdfleet.rollout import report as rollout_report
from pdfleet.verify.report import Report

from .browser import load, read_dom

FIXTURES = Path(__file__).parent / "fixtures"
HOSTILE = '</svg></title><script>alert("x")</script><img src="http://evil.invalid/x.png">'
PHASES = ["fleet gate", "out", "drained", "stopped", "applied", "started", "gated", "back"]


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def assert_self_contained(html: str) -> None:
    """No script, nothing the page would fetch: no src/href to another place, no CSS import or url()."""
    assert "<script" not in html.lower()
    for attr, value in re.findall(r'\s(src|href)\s*=\s*"([^"]*)"', html, re.IGNORECASE):
        assert not re.match(r"^\s*([a-z][a-z0-9+.-]*:|//)", value, re.IGNORECASE), (attr, value)
    assert "@import" not in html and "url(" not in html
    assert not re.search(r"(src|href)\s*=\s*[\"']?\s*https?:", html, re.IGNORECASE)


# --- unit: the renderers on report dicts --------------------------------------------------------------------------


def test_verify_page_of_a_real_passing_report() -> None:
    html = render_verify(fixture("verify-pass.json"))
    assert_self_contained(html)
    dom = read_dom(html)
    assert dom.figures == ["protocol", "cascade", "latency"]
    assert dom.verdict == "VERDICT: PASS exit 0"
    checks = [s["data-check"] for s in dom.shapes if "data-check" in s]
    assert checks == ["config", "liveness", "cascade", "recovery", "logs", "bench"]
    assert [s["data-cycle"] for s in dom.shapes if "data-cycle" in s] == ["1", "2"]
    # where the 120 killed sessions were (74 waiting for headers, 46 streaming), per cycle
    assert [s["data-phase"] for s in dom.shapes if "data-phase" in s] == ["killed waiting-headers",
                                                                          "killed streaming"] * 2
    assert "120 killed" in dom.text and "1613.0 ms" in dom.text  # the cascade's summary; liveness latency


def test_verify_page_of_a_failed_verdict() -> None:
    report = fixture("gate-failed.json")["report"]
    dom = read_dom(render_verify(report))
    assert dom.verdict == "VERDICT: FAIL exit 1"
    assert "What failed" in dom.text and "no answer within the 0.001 s deadline" in dom.text
    assert "The cascade recorded no cycle" in dom.text  # skipped on request: said, not drawn
    failed = [s for s in dom.shapes if s.get("data-status") == "fail"]
    assert [s["data-check"] for s in failed] == ["liveness"]


def test_verify_page_draws_the_latency_samples() -> None:
    report = fixture("verify-pass.json")
    bench = next(c for c in report["checks"] if c["name"] == "bench")
    bench["detail"]["latency_samples"] = {"ttft_ms": [60.0, 70.0, 71.0, 90.0], "tpot_ms": [24.0, 25.0, 26.0],
                                          "e2e_s": [1.5, 1.6, 1.7, 2.0]}
    dom = read_dom(render_verify(report))
    bins = [s for s in dom.shapes if "data-bin" in s]
    assert len(bins) >= 3 and "n=4" in dom.text and "No per-request latencies" not in dom.text


def test_rollout_page_of_a_real_rollout_with_its_client_load() -> None:
    report, client = fixture("rollout-fleet-ok.json"), fixture("rollout-fleet-ok-client-load.json")
    html = render_rollout(report, client)
    assert_self_contained(html)
    dom = read_dom(html)
    assert dom.figures == ["rollout-timeline", "client-outcomes"]
    assert dom.verdict.startswith("ROLLOUT: OK")
    for host in ("node2", "node3"):
        assert dom.phases(host) == [*PHASES, "out of router"], host
    outcomes = [s for s in dom.shapes if "data-outcome" in s]
    assert outcomes and {s["data-outcome"] for s in outcomes} == {"ok"}
    assert "ok 438" in dom.text and "No pairing samples" in dom.text


def test_rollout_page_of_a_failed_rollout() -> None:
    dom = read_dom(render_rollout(fixture("rollout-fleet-failed.json")))
    assert dom.verdict.startswith("ROLLOUT: FAILED")
    assert "node2 at gate: node2: gate FAIL" in dom.text
    assert dom.phases("node2") == [*PHASES[:6], "out of router"]  # never gated nor back by its own steps
    assert "failed at gate" in dom.text
    assert "not reached" in dom.text  # node3, router1
    assert "No client-side request outcomes" in dom.text


def test_rollout_page_draws_the_pairing_samples() -> None:
    report = fixture("rollout-fleet-ok.json")
    readd = report["hosts"]["node2"]["timeline"]["readd"]
    t = report["hosts"]["node2"]["timeline"]["gated"]
    urls = list(readd["before"])
    readd["samples"] = [{"t": t + 0.1, "counts": {u: 5.0 for u in urls}}, {"t": t + 0.2, "status": 200, "s": 0.1},
                        {"t": t + 0.3, "counts": {u: 6.0 for u in urls}}]
    readd["before"] = {u: 5.0 for u in urls}
    report["hosts"]["node2"]["timeline"]["gate"]["page"] = "/somewhere/node2-gate.html"
    html = render_rollout(report)
    dom = read_dom(html)
    assert dom.figures == ["rollout-timeline", "pairing"]
    circles = [s["class"] for s in dom.shapes if s.get("class") in ("o-ok", "ph-wait") and "cx" in s]
    assert circles == ["ph-wait", "o-ok"]
    assert "node2-gate.html" in dom.links  # the gate's own page, by its file name beside the report


def test_hostile_strings_are_text() -> None:
    verify = fixture("gate-failed.json")["report"]
    verify["target"]["profile"] = HOSTILE
    verify["checks"][0]["summary"] = HOSTILE
    verify["checks"][0]["name"] = HOSTILE
    verify["failures"][0]["problems"] = [HOSTILE]
    rollout = fixture("rollout-fleet-failed.json")
    rollout["hosts"][HOSTILE] = rollout["hosts"].pop("node1")
    rollout["order"] = [HOSTILE if h == "node1" else h for h in rollout["order"]]
    rollout["outcome"]["failure"]["message"] = HOSTILE
    rollout["hosts"][HOSTILE]["timeline"]["gate"]["page"] = f"/x/{HOSTILE}"
    for html in (render_verify(verify), render_rollout(rollout, [{"started": 1, "kind": HOSTILE}])):
        assert_self_contained(html)
        assert "&lt;/svg&gt;" in html and "<img" not in html
        dom = read_dom(html)
        assert "script" not in dom.tags and "img" not in dom.tags
        assert 'alert("x")' in dom.text  # shown as the text it is


@pytest.mark.parametrize("render", [render_verify, render_rollout])
def test_empty_reports_render(render: Any) -> None:
    for report in ({}, {"checks": [], "hosts": {}, "order": []}, {"checks": None, "hosts": None}):
        html = render(report)
        assert_self_contained(html)
        assert read_dom(html).verdict  # still says what it is: no verdict is shown as such
    assert "UNKNOWN" in read_dom(render_verify({})).verdict
    assert "nothing was rolled" in read_dom(render_rollout({})).text


def test_written_beside_the_json(tmp_path: Path) -> None:
    """Whenever a report's JSON is written, its page is written beside it; the JSON is unchanged."""
    data = fixture("verify-pass.json")
    report = Report.from_dict(data)
    page = report.write(tmp_path / "verify-1.json")
    assert page == tmp_path / "verify-1.html" == page_path(tmp_path / "verify-1.json") and page.is_file()
    assert json.loads((tmp_path / "verify-1.json").read_text()) == report.to_dict()
    rollout = fixture("rollout-fleet-ok.json")
    page = rollout_report.write(tmp_path / "r" / "rollout.json", rollout)
    assert page == tmp_path / "r" / "rollout.html" and page.is_file()
    assert json.loads((tmp_path / "r" / "rollout.json").read_text()) == rollout


# --- the browser: pages written from real runs, loaded by chromium-headless-shell ---------------------------------


def test_browser_builds_the_verify_pages(tmp_path: Path) -> None:
    page = write_verify_page(tmp_path / "verify.json", fixture("verify-pass.json"))
    dom = load(page)
    assert dom.figures == ["protocol", "cascade", "latency"] and "script" not in dom.tags
    assert dom.verdict == "VERDICT: PASS exit 0"
    assert len([s for s in dom.shapes if "data-check" in s]) == 6
    failed = load(write_verify_page(tmp_path / "gate.json", fixture("gate-failed.json")["report"]))
    assert failed.verdict == "VERDICT: FAIL exit 1"


def test_browser_builds_the_rollout_pages(tmp_path: Path) -> None:
    page = write_rollout_page(tmp_path / "rollout.json", fixture("rollout-fleet-ok.json"),
                              fixture("rollout-fleet-ok-client-load.json"))
    dom = load(page)
    assert dom.figures == ["rollout-timeline", "client-outcomes"] and "script" not in dom.tags
    assert dom.verdict.startswith("ROLLOUT: OK")
    assert dom.phases("node2") == [*PHASES, "out of router"]
    failed = load(write_rollout_page(tmp_path / "failed.json", fixture("rollout-fleet-failed.json")))
    assert failed.verdict.startswith("ROLLOUT: FAILED") and "failed at gate" in failed.text


def test_rollout_page_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`pdfleet rollout page REPORT --client-load FILE` writes the page beside the report and prints its path."""
    from pdfleet.cli import main

    report = tmp_path / "rollout-x" / "rollout.json"
    report.parent.mkdir()
    report.write_text((FIXTURES / "rollout-fleet-ok.json").read_text())
    assert main(["rollout", "page", str(report), "--client-load",
                 str(FIXTURES / "rollout-fleet-ok-client-load.json")]) == 0
    page = report.with_suffix(".html")
    assert capsys.readouterr().out.strip() == f"page: {page}"
    assert read_dom(page.read_text()).figures == ["rollout-timeline", "client-outcomes"]
    assert main(["rollout", "page", str(FIXTURES / "verify-pass.json")]) == 2
    assert "not a pdfleet rollout report" in capsys.readouterr().err
