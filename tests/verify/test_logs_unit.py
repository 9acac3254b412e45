"""Log sources and the logs check's verdict (including the inconclusive rule)."""

from __future__ import annotations

import math
from pathlib import Path

from pdfleet.inventory import load_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet.verify.cascade import killed_waiting
from pdfleet.verify.logs import (
    FileLogs,
    JournalDirLogs,
    abort_floor,
    journal_before_command,
    journal_command,
    logs_check,
)
from pdfleet.verify.result import CheckResult
from pdfleet.verify.settings import Settings
from pdfleet.verify.targets import Worker

P = Worker("prefill", "prefill", "http://p")
D = Worker("decode", "decode", "http://d")
ABORT = ("Decode transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=1): "
         "Aborted by AbortReq.\n")
HANDLED = ("[2026-01-01 10:00:0{n}] Prefill transfer failed for request rank=0 req.rid='r{n}' req.bootstrap_room={n} "
           "with exception KVTransferError(bootstrap_room={n}): Aborted by decode-side abort notification.\n")


def handled(count: int) -> str:
    return "".join(HANDLED.format(n=n) for n in range(1, count + 1))


def test_file_logs_read_only_after_the_mark(tmp_path: Path) -> None:
    f = tmp_path / "p.log"
    f.write_text("First message should be b'NixlMsgGuard'. Foreign traffic?\n")  # before the protocol
    src = FileLogs({"prefill": f})
    src.mark([P])
    with f.open("a") as fh:
        fh.write("Client disconnected\n")
    assert src.read(P) == "Client disconnected\n"


def test_clean_with_handled_aborts_passes(tmp_path: Path) -> None:
    (tmp_path / "p.log").write_text("Prefill batch. #new-seq: 1\n" + handled(3))
    (tmp_path / "d.log").write_text(ABORT * 3)
    src = FileLogs({"prefill": tmp_path / "p.log", "decode": tmp_path / "d.log"})
    r = logs_check([P, D], src, Settings())
    assert r.status == "pass" and r.measured["abort_events"] == 3 and r.measured["client_abort_lines"] == 6


def test_decode_side_aborts_alone_are_not_evidence(tmp_path: Path) -> None:
    """Issue 11 item 1: the decode's own AbortReq failures do not show that the prefill got an ABORT."""
    (tmp_path / "p.log").write_text("Prefill batch. #new-seq: 1\n")
    (tmp_path / "d.log").write_text(ABORT * 3 + "Client disconnected\n")
    src = FileLogs({"prefill": tmp_path / "p.log", "decode": tmp_path / "d.log"})
    r = logs_check([P, D], src, Settings())
    assert r.status == "inconclusive" and r.measured["abort_events"] == 0


def test_no_aborts_is_inconclusive(tmp_path: Path) -> None:
    (tmp_path / "p.log").write_text("all good\n")
    r = logs_check([P], FileLogs({"prefill": tmp_path / "p.log"}), Settings())
    assert r.status == "inconclusive" and "did not exercise the abort path" in r.summary


def test_prefill_failures_for_other_reasons_are_not_evidence(tmp_path: Path) -> None:
    """The prefill's own aborts and timeouts print the same 'Prefill ... failed' line with another reason."""
    (tmp_path / "p.log").write_text(
        "Prefill bootstrap failed for request rank=0 req.rid='a' req.bootstrap_room=5 with exception "
        "KVTransferError(bootstrap_room=5): Aborted by AbortReq.\n"
        "Prefill bootstrap failed for request rank=0 req.rid='b' req.bootstrap_room=6 with exception "
        "KVTransferError(bootstrap_room=6): Request 6 timed out after 300.0s in KVPoll.Bootstrapping\n")
    r = logs_check([P], FileLogs({"prefill": tmp_path / "p.log"}), Settings())
    assert r.status == "inconclusive" and r.measured["abort_events"] == 0


def test_generic_failure_counters_are_not_abort_evidence(tmp_path: Path) -> None:
    (tmp_path / "d.log").write_text("quiet\n")
    deltas = {"decode": {"sglang:num_aborted_requests_total": 4.0, "sglang:num_transfer_failed_reqs_total": 2.0,
                         "sglang:num_bootstrap_failed_reqs_total": 3.0}}
    r = logs_check([P, D], FileLogs({"decode": tmp_path / "d.log", "prefill": tmp_path / "d.log"}), Settings(),
                   deltas)
    assert r.status == "inconclusive" and r.measured["abort_events"] == 0
    assert r.measured["generic_failure_metric_delta"] == 9 and r.detail["decode"]["metric_deltas"] == deltas["decode"]


def test_a_death_before_the_protocol_fails_and_is_named(tmp_path: Path) -> None:
    """Issue 11 item 3: a wedge that predates the run fails the logs check, with the line and its time."""
    f = tmp_path / "p.log"
    f.write_text("[2026-01-01 09:59:00] The server is fired up\n[2026-01-01 09:59:30] Received multipart\n"
                 "Exception in thread Thread-1 (bootstrap_thread):\nTraceback (most recent call last):\n"
                 "  File 'conn.py', line 2349, in bootstrap_thread\n"
                 "AssertionError: First message should be b'NixlMsgGuard'. Foreign traffic?\n")
    src = FileLogs({"prefill": f})
    src.mark([P])
    with f.open("a") as fh:
        fh.write(handled(2))
    r = logs_check([P], src, Settings())
    assert r.status == "fail" and "BEFORE the protocol" in r.summary and "2026-01-01 09:59:30" in r.summary
    assert r.measured["thread_death"] == 2 and r.measured["thread_death_before_protocol"] == 2
    assert r.measured["deaths"][0]["worker"] == "prefill"


def test_journal_dumps_since_the_last_start(tmp_path: Path) -> None:
    w = Worker("pdfleet-prefill0", "prefill", "http://p", host="node1")
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "pdfleet-prefill0.log").write_text(handled(1))
    r = logs_check([w], JournalDirLogs(tmp_path), Settings())
    assert r.status == "pass" and "without their log since the last start" in r.summary
    (tmp_path / "node1" / "pdfleet-prefill0.before.log").write_text(
        "2026-01-01T09:00:00+0000 node1 python[1]: prefill bootstrap_thread died on engine_rank=0\n")
    r = logs_check([w], JournalDirLogs(tmp_path), Settings())
    assert r.status == "fail" and "2026-01-01T09:00:00" in r.summary


def test_death_fails_even_with_aborts(tmp_path: Path) -> None:
    (tmp_path / "p.log").write_text("Exception in thread Thread-1 (bootstrap_thread):\n" + handled(1))
    r = logs_check([P], FileLogs({"prefill": tmp_path / "p.log"}), Settings())
    assert r.status == "fail" and r.measured["thread_death"] == 1


def test_dropped_frames_fail_by_default_and_can_be_counted_only(tmp_path: Path) -> None:
    (tmp_path / "p.log").write_text("bootstrap_thread: unexpected leading frame b'X'\n" + handled(1))
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
    assert "journalctl _SYSTEMD_INVOCATION_ID=$id --until @1700000000 -o short-iso" in \
        journal_before_command("pdfleet-prefill0", 1700000000.7)
    conn = load_inventory(REPO_ROOT / "inventory" / "sim").connection("node1")
    # no key of its own: the ssh_config that `pdfleet sim up` writes names it (IdentityFile)
    assert (conn.address, conn.user, conn.key_file, conn.ssh_config) == (
        "10.77.0.11", "root", None, "/var/lib/pdfleet-sim/ssh_config")


def test_mono_cluster_needs_no_transfer_aborts(tmp_path: Path) -> None:
    (tmp_path / "m.log").write_text("Client disconnected\n")
    mono = Worker("mono", "mono", "http://m")
    assert logs_check([mono], FileLogs({"mono": tmp_path / "m.log"}), Settings()).status == "pass"


def test_an_empty_log_is_inconclusive(tmp_path: Path) -> None:
    """A worker that served the protocol logs something: an empty log means the wrong unit or source."""
    (tmp_path / "p.log").write_text("")
    (tmp_path / "d.log").write_text(ABORT * 3 + handled(3))
    src = FileLogs({"prefill": tmp_path / "p.log", "decode": tmp_path / "d.log"})
    r = logs_check([P, D], src, Settings())
    assert r.status == "inconclusive" and "empty" in r.summary and any("prefill" in f for f in r.failures)


def test_an_empty_log_of_a_unit_whose_journal_reads_is_quiet_not_unreadable(tmp_path: Path) -> None:
    """A prefill whose every session got its first token before the kill (a freshly restarted one, ahead of its
    queue) logs nothing at info since the protocol start; its journal since the unit's start, read through the
    same source, shows the source reads that unit, and a death would have logged there too. Without those lines
    the empty log stays inconclusive (the case above, and this one with an empty journal before)."""
    host = tmp_path / "node1"
    host.mkdir()
    p, d = (Worker("pdfleet-prefill0", "prefill", "http://p", host="node1"),
            Worker("pdfleet-decode0", "decode", "http://d", host="node1"))
    (host / "pdfleet-prefill0.log").write_text("")
    (host / "pdfleet-decode0.log").write_text(ABORT * 3)
    (host / "pdfleet-prefill1.log").write_text(handled(3))
    p1 = Worker("pdfleet-prefill1", "prefill", "http://p1", host="node1")
    (host / "pdfleet-prefill0.before.log").write_text("2026-01-01T09:00:00+0000 node1 python[1]: server started\n")
    (host / "pdfleet-decode0.before.log").write_text("2026-01-01T09:00:00+0000 node1 python[2]: server started\n")
    (host / "pdfleet-prefill1.before.log").write_text("2026-01-01T09:00:00+0000 node1 python[3]: server started\n")
    r = logs_check([p, d, p1], JournalDirLogs(tmp_path), Settings())
    assert r.status == "pass", (r.summary, r.failures)
    assert "quiet" in r.detail["pdfleet-prefill0"] and not any("empty" in f for f in r.failures)
    (host / "pdfleet-prefill0.before.log").write_text("")
    r = logs_check([p, d, p1], JournalDirLogs(tmp_path), Settings())
    assert r.status == "inconclusive" and any("pdfleet-prefill0" in f and "empty" in f for f in r.failures), r.failures


# Issue 25 item 4: at info the evidence is the patch's rate-limited count line (the real line is classified in
# test_signatures_real.py); the floor scales with the sessions the cascade killed before their first token.
COUNTED = ("[2026-01-01 10:00:0{s}] pdfleet: bootstrap_thread handled {n} decode ABORT message(s) on "
           "engine_rank={rank} since its previous line (total {total})\n")


def counted(*lines: tuple[int, int]) -> str:
    """One count line per (rank, count), totals running per rank as the patch writes them."""
    totals: dict[int, int] = {}
    out = []
    for i, (rank, n) in enumerate(lines):
        totals[rank] = totals.get(rank, 0) + n
        out.append(COUNTED.format(s=i % 10, n=n, rank=rank, total=totals[rank]))
    return "".join(out)


def test_count_lines_sum_per_rank_and_a_worker_counts_its_largest_rank(tmp_path: Path) -> None:
    (tmp_path / "p.log").write_text(counted((0, 3), (1, 4), (0, 2)) + handled(2))
    r = logs_check([P], FileLogs({"prefill": tmp_path / "p.log"}), Settings())
    assert r.status == "pass" and r.measured["abort_events"] == 5  # rank 0: 3 + 2 (each rank gets every room)


def test_a_low_share_of_the_killed_sessions_is_inconclusive(tmp_path: Path) -> None:
    """The issue's case: 120 sessions killed before their first byte, 6 handled ABORTs: not a PASS."""
    s = Settings()
    (tmp_path / "low.log").write_text(counted((0, 1), (0, 5)))
    low = logs_check([P], FileLogs({"prefill": tmp_path / "low.log"}), s, killed_waiting=120)
    assert low.status == "inconclusive" and low.measured["abort_events"] == 6
    need = math.ceil(s.min_abort_share * 120)
    assert f"need >= {need}" in low.summary and low.thresholds["abort_events_min"] == need
    assert abort_floor(s, 120) == need > 6
    (tmp_path / "good.log").write_text(counted((0, 1), (0, 60), (0, 50)))
    good = logs_check([P], FileLogs({"prefill": tmp_path / "good.log"}), s, killed_waiting=120)
    assert good.status == "pass" and good.measured["abort_events"] == 111
    # without a cascade measurement (an old report) the floor is min_abort_events
    assert logs_check([P], FileLogs({"prefill": tmp_path / "low.log"}), s).status == "pass"


def test_the_floor_counts_only_sessions_killed_before_their_first_token() -> None:
    cascade = CheckResult("cascade", "pass", "", {"killed": 90, "killed_phases": {
        "connecting": 3, "waiting-headers": 10, "before-first-token": 50, "streaming": 27}})
    assert killed_waiting(cascade) == 60
    assert killed_waiting(None) is None and killed_waiting(CheckResult("cascade", "skipped", "")) is None
    assert abort_floor(Settings(min_abort_events=1, min_abort_share=0.5), 3) == 2
    assert abort_floor(Settings(min_abort_events=4, min_abort_share=0.5), 3) == 4
    assert abort_floor(Settings(min_abort_share=0.5), 0) == Settings().min_abort_events
    # --min-abort-events 0 asks for no evidence: the share does not bring it back (the run is incomplete instead)
    assert abort_floor(Settings(min_abort_events=0, min_abort_share=0.5), 60) == 0
