"""Log sources and the logs check's verdict (including the inconclusive rule)."""

from __future__ import annotations

from pathlib import Path

from pdfleet.verify.logs import FileLogs, JournalDirLogs, journal_command, logs_check
from pdfleet.verify.settings import Settings
from pdfleet.verify.targets import Worker

P = Worker("prefill", "prefill", "http://p")
D = Worker("decode", "decode", "http://d")
ABORT = ("Decode transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=1): "
         "Aborted by AbortReq.\n")


def test_file_logs_read_only_after_the_mark(tmp_path: Path) -> None:
    f = tmp_path / "p.log"
    f.write_text("First message should be b'NixlMsgGuard'. Foreign traffic?\n")  # before the protocol
    src = FileLogs({"prefill": f})
    src.mark([P])
    with f.open("a") as fh:
        fh.write("Client disconnected\n")
    assert src.read(P) == "Client disconnected\n"


def test_clean_with_aborts_passes(tmp_path: Path) -> None:
    (tmp_path / "p.log").write_text("Prefill batch. #new-seq: 1\n")
    (tmp_path / "d.log").write_text(ABORT * 3)
    src = FileLogs({"prefill": tmp_path / "p.log", "decode": tmp_path / "d.log"})
    r = logs_check([P, D], src, Settings())
    assert r.status == "pass" and r.measured["abort_events"] == 3 and r.measured["transfer_aborts"] == 3


def test_no_aborts_is_inconclusive(tmp_path: Path) -> None:
    (tmp_path / "p.log").write_text("all good\n")
    r = logs_check([P], FileLogs({"prefill": tmp_path / "p.log"}), Settings())
    assert r.status == "inconclusive" and "did not exercise the abort path" in r.summary


def test_aborts_only_mid_decode_is_inconclusive_unless_allowed(tmp_path: Path) -> None:
    (tmp_path / "d.log").write_text("Client disconnected\n")
    src = FileLogs({"decode": tmp_path / "d.log"})
    assert logs_check([D], src, Settings()).status == "inconclusive"
    assert logs_check([D], src, Settings(min_transfer_aborts=0)).status == "pass"


def test_metric_deltas_count_as_abort_evidence(tmp_path: Path) -> None:
    (tmp_path / "d.log").write_text("quiet\n")
    deltas = {"decode": {"sglang:num_aborted_requests_total": 4.0, "sglang:num_transfer_failed_reqs_total": 2.0}}
    r = logs_check([D], FileLogs({"decode": tmp_path / "d.log"}), Settings(), deltas)
    assert r.status == "pass" and r.measured["abort_events"] == 6 and r.measured["transfer_aborts"] == 2


def test_death_fails_even_with_aborts(tmp_path: Path) -> None:
    (tmp_path / "p.log").write_text("Exception in thread Thread-1 (bootstrap_thread):\n" + ABORT)
    r = logs_check([P], FileLogs({"prefill": tmp_path / "p.log"}), Settings())
    assert r.status == "fail" and r.measured["thread_death"] == 1


def test_dropped_frames_fail_by_default_and_can_be_counted_only(tmp_path: Path) -> None:
    (tmp_path / "p.log").write_text("bootstrap_thread: unexpected leading frame b'X'\n" + ABORT)
    src = FileLogs({"prefill": tmp_path / "p.log"})
    assert logs_check([P], src, Settings()).status == "fail"
    allowed = logs_check([P], src, Settings(allow_dropped_frames=True))
    assert allowed.status == "pass" and allowed.measured["dropped_frame"] == 1


def test_unreadable_or_missing_source_is_inconclusive(tmp_path: Path) -> None:
    assert logs_check([P], None, Settings()).status == "inconclusive"
    r = logs_check([P], JournalDirLogs(tmp_path), Settings())
    assert r.status == "inconclusive" and "unreadable" in r.summary


def test_journal_dir_layouts(tmp_path: Path) -> None:
    w = Worker("pdfleet-prefill0", "prefill", "http://p", host="node1")
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "pdfleet-prefill0.log").write_text("x\n")
    assert JournalDirLogs(tmp_path).read(w) == "x\n"


def test_journal_command() -> None:
    assert journal_command("pdfleet-prefill0", 1700000000.7) == \
        "journalctl -u pdfleet-prefill0 --since @1700000000 -o cat --no-pager"


def test_mono_cluster_needs_no_transfer_aborts(tmp_path: Path) -> None:
    (tmp_path / "m.log").write_text("Client disconnected\n")
    mono = Worker("mono", "mono", "http://m")
    assert logs_check([mono], FileLogs({"mono": tmp_path / "m.log"}), Settings()).status == "pass"


def test_an_empty_log_is_inconclusive(tmp_path: Path) -> None:
    """A worker that served the protocol logs something: an empty log means the wrong unit or source."""
    (tmp_path / "p.log").write_text("")
    (tmp_path / "d.log").write_text(ABORT * 3)
    src = FileLogs({"prefill": tmp_path / "p.log", "decode": tmp_path / "d.log"})
    r = logs_check([P, D], src, Settings())
    assert r.status == "inconclusive" and "empty" in r.summary and any("prefill" in f for f in r.failures)
