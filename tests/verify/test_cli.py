"""`pdfleet verify` arguments, exit codes without a cluster, and the deferred-logs (Ansible) flow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pdfleet.cli import main as pdfleet_main
from pdfleet.verify.report import Report
from pdfleet.verify.result import CheckResult
from pdfleet_sim.testing.localpd import free_port

from .conftest import run_verify


def main(argv: list[str]) -> int:
    return pdfleet_main(["verify", *argv])


@pytest.mark.parametrize("args", [
    ["--router", "http://127.0.0.1:1"],  # no prefill/decode
    ["--prefill", "http://127.0.0.1:1"],  # no router
    ["--router", "http://127.0.0.1:1", "--prefill", "http://p", "--decode", "http://d", "--log-file", "nope"],
    ["--router", "http://127.0.0.1:1", "--prefill", "http://p", "--decode", "http://d", "--log-file", "other=/x"],
    ["--resume", "/nonexistent.json"],  # no --journal-dir
])
def test_bad_arguments_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert "pdfleet:" in capsys.readouterr().err


def test_argparse_rejects_bad_values() -> None:
    with pytest.raises(SystemExit) as e:
        main(["--concurrency", "0"])
    assert e.value.code == 2


def test_unreachable_router_could_not_run(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    proc = run_verify(["--router", f"http://127.0.0.1:{port}", "--prefill", "http://127.0.0.1:1",
                       "--decode", "http://127.0.0.1:2", "--report", str(tmp_path / "r.json")], timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["verdict"] == "inconclusive" and data["ok"] is False
    # the page beside the JSON, its path printed (pdfleet.htmlreport; tests/htmlreport check it in a browser)
    assert f"page: {tmp_path / 'r.html'}" in proc.stdout and (tmp_path / "r.html").is_file()
    assert "unreachable" in data["error"] and data["failures"][0]["check"] == "protocol"


def _deferred_report(path: Path) -> None:
    r = Report(target={"router": "http://10.77.0.11:8000", "profile": "pd-4p4d", "workers": [
        {"name": "pdfleet-prefill0", "role": "prefill", "url": "http://10.77.0.11:30000", "host": "node1", "tp": 4},
        {"name": "pdfleet-decode0", "role": "decode", "url": "http://10.77.0.11:30001", "host": "node1", "tp": 4}]},
        settings={"min_abort_events": 1, "cycles": 2}, started_epoch=1700000000.0,
        checks=[CheckResult("config", "pass", "ok"), CheckResult("liveness", "pass", "ok"),
                CheckResult("cascade", "pass", "ok"), CheckResult("recovery", "pass", "ok"),
                CheckResult("logs", "deferred", "later"), CheckResult("bench", "no-baseline", "no baseline")])
    r.write(path)


HANDLED = ("Prefill transfer failed for request rank=0 req.rid='a' req.bootstrap_room=3 with exception "
           "KVTransferError(bootstrap_room=3): Aborted by decode-side abort notification.\n")


@pytest.mark.parametrize(("decode_log", "rc", "verdict"), [
    ("Decode transfer failed for request ... Aborted by AbortReq.\n", 0, "pass"),
    ("Decode transfer failed ... Aborted by AbortReq.\nException in thread Thread-1 (bootstrap_thread):\n", 1, "fail"),
    ("nothing happened\n", 0, "pass"),  # the evidence is in the prefill's journal
])
def test_resume_with_journal_dir(tmp_path: Path, decode_log: str, rc: int, verdict: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a passing verdict stores the benchmark baseline under ./reports
    report = tmp_path / "verify.json"
    _deferred_report(report)
    assert json.loads(report.read_text())["exit_code"] == 2  # deferred: not a verdict yet
    journal = tmp_path / "journal" / "node1"
    journal.mkdir(parents=True)
    (journal / "pdfleet-prefill0.log").write_text("Prefill batch. #new-seq: 1\n" + HANDLED)
    (journal / "pdfleet-decode0.log").write_text(decode_log)
    assert main(["--resume", str(report), "--journal-dir", str(tmp_path / "journal"), "--report", str(report)]) == rc
    data = json.loads(report.read_text())
    assert data["verdict"] == verdict
    assert [c["name"] for c in data["checks"]] == ["config", "liveness", "cascade", "recovery", "logs", "bench"]
    assert data["checks"][4]["measured"]["source"] == "journal dumps"


def test_resume_without_prefill_evidence_is_inconclusive(tmp_path: Path) -> None:
    report = tmp_path / "verify.json"
    _deferred_report(report)
    journal = tmp_path / "journal" / "node1"
    journal.mkdir(parents=True)
    (journal / "pdfleet-prefill0.log").write_text("Prefill batch. #new-seq: 1\n")
    (journal / "pdfleet-decode0.log").write_text("Decode transfer failed ... Aborted by AbortReq.\n")
    assert main(["--resume", str(report), "--journal-dir", str(tmp_path / "journal"), "--report", str(report)]) == 2


def test_baseline_file_is_made_absolute_for_the_resume_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A --defer-logs report is finished from another directory: its baseline path must not move with it."""
    from pdfleet.cli import build_parser
    from pdfleet.verify.cli import settings_from_args

    monkeypatch.chdir(tmp_path)
    s = settings_from_args(build_parser().parse_args(["verify", "--baseline-file", "kept/baselines.json"]))
    assert s.baseline_file == tmp_path / "kept" / "baselines.json"


def test_resume_writes_the_journals_from_stdin_then_scans_them(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The verification play's last step: the collected dumps on stdin are saved in the --journal-dir layout and
    scanned in the same command; bad input is refused before anything is written."""
    import io

    report = tmp_path / "verify.json"
    _deferred_report(report)
    journal = tmp_path / "journal"
    monkeypatch.chdir(tmp_path)  # a passing verdict stores the benchmark baseline under ./reports
    dumps = {"node1": {"pdfleet-prefill0": {"since": "Prefill batch. #new-seq: 1\n" + HANDLED.rstrip("\n"),
                                            "before": "boot ok",
                                            "error": ""},
                       "pdfleet-decode0": {"since": "Decode transfer failed ... Aborted by AbortReq.", "before": None,
                                           "error": ""}}}
    args = ["--resume", str(report), "--journal-dir", str(journal), "--journals-from-stdin", "--report", str(report)]
    monkeypatch.setattr("sys.stdin", io.StringIO("not json"))
    assert main(args) == 2 and not journal.exists()
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(["a", "list"])))
    assert main(args) == 2 and not journal.exists()
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(dumps)))
    assert main(["--resume", str(tmp_path / "gone.json"), *args[2:]]) == 2 and not journal.exists()
    assert main(args) == 0
    assert (journal / "node1" / "pdfleet-prefill0.log").read_text().endswith("decode-side abort notification.\n")
    assert (journal / "node1" / "pdfleet-prefill0.before.log").read_text() == "boot ok\n"
    assert json.loads(report.read_text())["verdict"] == "pass"
    assert main(["--router", "http://127.0.0.1:1", "--prefill", "http://p", "--decode", "http://d",
                 "--journals-from-stdin"]) == 2


def test_the_plan_document_can_come_on_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--plan -`: the verification play hands over the preflight's plan without a file."""
    import io

    from pdfleet.inventory_plan import plan_inventory
    from pdfleet.paths import DEFAULT_INVENTORY
    from pdfleet.plandoc import PlanDocumentError, plan_document, read_plan_document

    doc = plan_document(plan_inventory(DEFAULT_INVENTORY))
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(doc)))
    assert read_plan_document(Path("-"))["router_url"] == doc["router_url"]
    monkeypatch.setattr("sys.stdin", io.StringIO("{}"))
    with pytest.raises(PlanDocumentError, match="plan schema"):
        read_plan_document(Path("-"))
