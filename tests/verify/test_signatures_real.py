"""The log signatures against what SGLang's real NIXL prefill code prints (issue 11 item 1).

``capture_real_logs.py`` runs the real ``bootstrap_thread`` and ``transfer_worker`` of each pinned version,
pristine and patched, on CPU; these tests classify exactly what they printed. The runtime is built (once,
cached) when it is missing, never skipped.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pdfleet.patch import runtime
from pdfleet.verify.logs import FileLogs, logs_check
from pdfleet.verify.settings import Settings
from pdfleet.verify.signatures import ABORT_HANDLED, scan_text
from pdfleet.verify.targets import Worker

VERSIONS = tuple(ABORT_HANDLED)
CAPTURE = Path(__file__).with_name("capture_real_logs.py")


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    rt = runtime.ensure_runtime(list(VERSIONS))
    out = tmp_path_factory.mktemp("real-logs")
    runs = [(v, k) for v in VERSIONS for k in ("pristine", "patched")]

    def capture(run: tuple[str, str]) -> str:
        version, kind = run
        dest = out / f"{version}-{kind}.log"
        env = {**rt.env(version), "PYTHONWARNINGS": "ignore"}
        proc = subprocess.run([str(rt.python), str(CAPTURE), version,
                               str(rt.conn_file(version, kind == "patched")), str(dest)],
                              capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, f"{version} {kind}: {proc.stderr[-2000:]}"
        return dest.read_text()

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(runs, pool.map(capture, runs), strict=True))


@pytest.mark.parametrize("version", VERSIONS)
def test_each_evidence_signature_matches_a_line_the_real_handler_printed(
        captured: dict[tuple[str, str], str], version: str) -> None:
    lines = captured[(version, "patched")].splitlines()
    for sig in ABORT_HANDLED[version]:
        assert any(sig.pattern.search(line) for line in lines), (sig.pattern.pattern, sig.printed_by)


@pytest.mark.parametrize("version", VERSIONS)
def test_patched_prefill_handles_the_abort_and_survives(captured: dict[tuple[str, str], str], version: str) -> None:
    text = captured[(version, "patched")]
    assert "alive at the end: True" in text
    scan = scan_text(text, version)
    # room 8 (handler debug + scheduler warning, counted once) and room 99 (the handler's "ignoring" branch)
    assert scan.aborts_handled == 2
    assert scan.counts["thread_death"] == 0 and scan.counts["transfer_error"] == 0
    assert scan.uncaught_tracebacks == 0
    assert scan.counts["dropped_frame"] == 1  # the unknown frame, skipped by part 3 of the patch


def test_pristine_0515_dies_on_abort_with_no_evidence(captured: dict[tuple[str, str], str]) -> None:
    text = captured[("0.5.15.post1", "pristine")]
    assert "alive at the end: False" in text
    scan = scan_text(text, "0.5.15.post1")
    assert scan.aborts_handled == 0, "the pristine 0.5.15 thread never handles ABORT: nothing may count"
    assert scan.counts["thread_death"] >= 1 and scan.uncaught_tracebacks == 0
    assert scan.counts["transfer_error"] == 1  # "Unexpected transfer worker error for room 9"
    assert any("Exception in thread" in d["line"] for d in scan.deaths)
    assert all(d["time"] != "unknown" for d in scan.deaths)


def test_pristine_0523_handles_abort_but_dies_on_an_unknown_frame(captured: dict[tuple[str, str], str]) -> None:
    text = captured[("0.5.23", "pristine")]
    scan = scan_text(text, "0.5.23")
    assert scan.aborts_handled == 2
    assert scan.counts["thread_death"] >= 2  # "bootstrap_thread died" and Python's "Exception in thread"
    assert scan.uncaught_tracebacks == 0


def test_the_check_fails_the_real_pristine_log_and_passes_the_patched_one(
        captured: dict[tuple[str, str], str], tmp_path: Path) -> None:
    prefill = Worker("prefill", "prefill", "http://p")
    (tmp_path / "bad.log").write_text(captured[("0.5.15.post1", "pristine")])
    bad = logs_check([prefill], FileLogs({"prefill": tmp_path / "bad.log"}), Settings(), version="0.5.15.post1")
    assert bad.status == "fail" and "thread-death" in bad.summary and bad.measured["abort_events"] == 0
    good_text = "\n".join(line for line in captured[("0.5.15.post1", "patched")].splitlines()
                          if "unexpected leading frame" not in line)  # the frame we sent on purpose
    (tmp_path / "good.log").write_text(good_text)
    good = logs_check([prefill], FileLogs({"prefill": tmp_path / "good.log"}), Settings(), version="0.5.15.post1")
    assert good.status == "pass" and good.measured["abort_events"] == 2
