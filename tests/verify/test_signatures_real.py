"""The log signatures against what SGLang's real NIXL prefill code prints (issue 11 item 1).

``capture_real_logs.py`` runs the real ``bootstrap_thread`` and ``transfer_worker`` of each pinned version,
pristine and patched (the pdfleet patch applied to the wheel's conn.py), on CPU, with the conn module at
``debug`` and at the production level ``info`` (issue 25 item 4); these tests classify exactly what they printed.
The abort evidence is matched only against what the real code produced: the lines the conn module's own logger
emitted, and the failure reason its ABORT handler recorded as SGLang's ``KVTransferError`` renders it (the
scheduler's warning that carries that reason in production is composed by the capture script in
``prefill.py``'s format: it is classified with the rest, but never taken as proof that a signature matches the
real handler). The runtime is built (once, cached) when it is missing, never skipped.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pdfleet.patch import runtime
from pdfleet.verify.logs import FileLogs, logs_check
from pdfleet.verify.settings import Settings
from pdfleet.verify.signatures import ABORT_COUNTED, ABORT_HANDLED, ABORT_LOG_INTERVAL_S, scan_text
from pdfleet.verify.targets import Worker

VERSIONS = tuple(ABORT_HANDLED)
CAPTURE = Path(__file__).with_name("capture_real_logs.py")


Capture = tuple[str, str, str]  # version, pristine|patched, log level of the conn module
CONN_ONLY = ".conn"  # what the conn module's own logger emitted (capture_real_logs.py)
REASON = ".reason"  # the failure reason the real handler recorded for room 8, as KVTransferError renders it
RUNS: tuple[Capture, ...] = (*((v, k, "debug") for v in VERSIONS for k in ("pristine", "patched")),
                             *((v, "patched", "info") for v in VERSIONS), ("0.5.15.post1", "pristine", "info"))


@pytest.fixture(scope="module")
def capture_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("real-logs")


@pytest.fixture(scope="module")
def captured(capture_dir: Path) -> dict[Capture, str]:
    rt = runtime.ensure_runtime(list(VERSIONS))
    out = capture_dir

    def capture(run: Capture) -> str:
        version, kind, level = run
        dest = out / f"{version}-{kind}-{level}.log"
        env = {**rt.env(version), "PYTHONWARNINGS": "ignore"}
        proc = subprocess.run([str(rt.python), str(CAPTURE), version,
                               str(rt.conn_file(version, kind == "patched")), str(dest), level],
                              capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, f"{version} {kind} {level}: {proc.stderr[-2000:]}"
        return dest.read_text()

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(RUNS, pool.map(capture, RUNS), strict=True))


@pytest.mark.parametrize("version", VERSIONS)
def test_each_evidence_signature_matches_what_the_real_handler_produced(
        captured: dict[Capture, str], capture_dir: Path, version: str) -> None:
    """Each signature must match a line the patched conn module logged itself, or the failure reason its ABORT
    handler recorded (rendered by SGLang's own KVTransferError): never a line the capture script composed."""
    base = capture_dir / f"{version}-patched-debug.log"
    assert base.read_text() == captured[(version, "patched", "debug")]
    conn_lines = Path(str(base) + CONN_ONLY).read_text().splitlines()
    reason = Path(str(base) + REASON).read_text().strip()
    assert reason, "the real handler recorded no failure reason for the aborted room"
    for sig in ABORT_HANDLED[version]:
        assert any(sig.pattern.search(line) for line in [*conn_lines, reason]), (sig.pattern.pattern, sig.printed_by)
    debug = ABORT_HANDLED[version][1]
    assert sum(bool(debug.pattern.search(line)) for line in conn_lines) == 2, "rooms 8 and 99, from the handler"
    counted = [m for line in conn_lines if (m := ABORT_COUNTED.pattern.search(line))]
    assert counted and counted[-1].group("total") == "2", conn_lines  # the patch's count line, from conn.py


@pytest.mark.parametrize("version", VERSIONS)
def test_patched_prefill_handles_the_abort_and_survives(captured: dict[Capture, str], version: str) -> None:
    text = captured[(version, "patched", "debug")]
    assert "alive at the end: True" in text
    scan = scan_text(text, version)
    # room 8 (handler debug + scheduler warning, counted once) and room 99 (the handler's "ignoring" branch)
    assert scan.aborts_handled == 2
    assert scan.counts["thread_death"] == 0 and scan.counts["transfer_error"] == 0
    assert scan.uncaught_tracebacks == 0
    assert scan.counts["dropped_frame"] == 1  # the unknown frame, skipped by part 3 of the patch


def test_pristine_0515_dies_on_abort_with_no_evidence(captured: dict[Capture, str]) -> None:
    text = captured[("0.5.15.post1", "pristine", "debug")]
    assert "alive at the end: False" in text
    scan = scan_text(text, "0.5.15.post1")
    assert scan.aborts_handled == 0, "the pristine 0.5.15 thread never handles ABORT: nothing may count"
    assert scan.counts["thread_death"] >= 1 and scan.uncaught_tracebacks == 0
    assert scan.counts["transfer_error"] == 1  # "Unexpected transfer worker error for room 9"
    assert any("Exception in thread" in d["line"] for d in scan.deaths)
    assert all(d["time"] != "unknown" for d in scan.deaths)


def test_pristine_0523_handles_abort_but_dies_on_an_unknown_frame(captured: dict[Capture, str]) -> None:
    text = captured[("0.5.23", "pristine", "debug")]
    scan = scan_text(text, "0.5.23")
    assert scan.aborts_handled == 2
    assert scan.counts["thread_death"] >= 2  # "bootstrap_thread died" and Python's "Exception in thread"
    assert scan.uncaught_tracebacks == 0


def test_the_check_fails_the_real_pristine_log_and_passes_the_patched_one(
        captured: dict[Capture, str], tmp_path: Path) -> None:
    prefill = Worker("prefill", "prefill", "http://p")
    (tmp_path / "bad.log").write_text(captured[("0.5.15.post1", "pristine", "debug")])
    bad = logs_check([prefill], FileLogs({"prefill": tmp_path / "bad.log"}), Settings(), version="0.5.15.post1")
    assert bad.status == "fail" and "thread-death" in bad.summary and bad.measured["abort_events"] == 0
    good_text = "\n".join(line for line in captured[("0.5.15.post1", "patched", "debug")].splitlines()
                          if "unexpected leading frame" not in line)  # the frame we sent on purpose
    (tmp_path / "good.log").write_text(good_text)
    good = logs_check([prefill], FileLogs({"prefill": tmp_path / "good.log"}), Settings(), version="0.5.15.post1")
    assert good.status == "pass" and good.measured["abort_events"] == 2


# At the production log level (info): our patch's rate-limited count line is the evidence, for both pins.

@pytest.mark.parametrize("version", VERSIONS)
def test_at_info_the_patched_prefill_counts_its_handled_aborts(captured: dict[Capture, str], version: str) -> None:
    text = captured[(version, "patched", "info")]
    assert "alive at the end: True" in text
    assert "Received abort notification" not in text, "the per-room handler lines are debug: not at info"
    lines = [m for line in text.splitlines() if (m := ABORT_COUNTED.pattern.search(line))]
    # two ABORTs 0.3 s apart: the first is written at once, the second by the timer one interval later
    assert [(m.group("count"), m.group("total")) for m in lines] == [("1", "1"), ("1", "2")]
    scan = scan_text(text, version)
    assert scan.aborts_handled == 2
    assert scan.counts["thread_death"] == 0 and scan.counts["transfer_error"] == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_the_verifier_waits_as_long_as_the_patch_rate_limits(version: str) -> None:
    patched = runtime.ensure_runtime([version]).conn_file(version, True).read_text()
    assert f"INTERVAL_S = {ABORT_LOG_INTERVAL_S!r}" in patched


def test_at_info_pristine_0515_leaves_no_evidence(captured: dict[Capture, str]) -> None:
    scan = scan_text(captured[("0.5.15.post1", "pristine", "info")], "0.5.15.post1")
    assert scan.aborts_handled == 0 and scan.counts["thread_death"] >= 1  # the thread dies on the first ABORT


def test_at_info_the_check_fails_pristine_and_floors_the_patched_evidence(
        captured: dict[Capture, str], tmp_path: Path) -> None:
    prefill = Worker("prefill", "prefill", "http://p")
    (tmp_path / "bad.log").write_text(captured[("0.5.15.post1", "pristine", "info")])
    bad = logs_check([prefill], FileLogs({"prefill": tmp_path / "bad.log"}), Settings(), version="0.5.15.post1",
                     killed_waiting=2)
    assert bad.status == "fail" and bad.measured["abort_events"] == 0
    good_text = "\n".join(line for line in captured[("0.5.15.post1", "patched", "info")].splitlines()
                          if "unexpected leading frame" not in line)
    (tmp_path / "good.log").write_text(good_text)
    src = FileLogs({"prefill": tmp_path / "good.log"})
    good = logs_check([prefill], src, Settings(), version="0.5.15.post1", killed_waiting=2)
    assert good.status == "pass" and good.measured["abort_events"] == 2, good.summary
    # the same two handled ABORTs after a cascade that killed 10 sessions before their first token: too few
    low = logs_check([prefill], src, Settings(), version="0.5.15.post1", killed_waiting=10)
    assert low.status == "inconclusive" and "need >= 5" in low.summary, low.summary
