"""tests/suite.py, `make test`'s runner: without arguments it builds the caches once, then runs the fleet scenario
and the rest as two pytest processes at once, with separate JUnit files, and fails when either fails (pytest's 5,
no test collected, included); with arguments it runs one pytest with them. pytest is replaced here by a script
that records its arguments and exits as told."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
import suite

FAKE = """\
import json, os, sys, time
args = sys.argv[1:]
scenario = "tests/scenario" in args
try:  # SIGINT: each tears down (pytest's Ctrl-C), and says so
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps({"args": args, "start": time.time()}) + "\\n")
    if scenario:
        print("scenario output", flush=True)
    if os.environ.get("FAKE_INTERRUPT"):  # the rest: CI's timeout kills the runner once both have started
        if not scenario:
            while len(open(os.environ["FAKE_LOG"]).readlines()) < 2:
                time.sleep(0.05)
            os.kill(os.getppid(), 15)
        time.sleep(30)
except KeyboardInterrupt:
    with open(os.environ["FAKE_LOG"] + ".down", "a") as down:
        down.write(("scenario" if scenario else "rest") + " torn down\\n")
    sys.exit(2)
time.sleep(0.5)
with open(os.environ["FAKE_LOG"] + ".end", "a") as log:
    log.write(json.dumps({"scenario": scenario, "end": time.time()}) + "\\n")
sys.exit(int(os.environ["FAKE_SCENARIO_RC" if scenario else "FAKE_REST_RC"]))
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "fake_pytest.py"
    script.write_text(FAKE)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setattr(suite, "PYTEST", [sys.executable, str(script)])
    monkeypatch.setattr(suite, "REPORTS", tmp_path / "reports")
    monkeypatch.setattr(suite, "SCENARIO_LOG", tmp_path / "reports" / "scenario.log")
    monkeypatch.setattr(suite, "prepare_caches", lambda: (tmp_path / "prepared").touch())
    monkeypatch.setenv("FAKE_LOG", str(log))
    return log


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize(("rest", "scenario", "expected"), [(0, 0, 0), (1, 0, 1), (0, 1, 1), (0, 5, 5), (5, 0, 5)])
def test_the_split_runs_both_at_once_and_fails_when_either_fails(
        fake: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        rest: int, scenario: int, expected: int) -> None:
    monkeypatch.setenv("FAKE_REST_RC", str(rest))
    monkeypatch.setenv("FAKE_SCENARIO_RC", str(scenario))
    assert suite.main(["--durations=25", "--junitxml=reports/junit.xml"]) == expected
    calls = _calls(fake)
    assert len(calls) == 2 and (fake.parent / "prepared").exists()
    by_kind = {("tests/scenario" in c["args"]): c for c in calls}
    assert by_kind[False]["args"] == ["--durations=25", "--junitxml=reports/junit.xml", "--ignore=tests/scenario"]
    assert by_kind[True]["args"][0] == "--durations=25" and by_kind[True]["args"][1].endswith("junit-scenario.xml")
    ends = {c["scenario"]: c["end"] for c in _calls(Path(f"{fake}.end"))}
    assert by_kind[True]["start"] < ends[False] and by_kind[False]["start"] < ends[True]  # at once: they overlap
    out, err = capfd.readouterr()
    assert "scenario output" in out and f"exit: the rest {rest}, the fleet scenario {scenario}" in out
    assert ("collected no tests" in err) == (expected == 5)


def test_chosen_tests_run_as_one_pytest(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_REST_RC", "5")
    assert suite.main(["--durations=25", "tests/plan", "-x"]) == 5
    assert [c["args"] for c in _calls(fake)] == [["--durations=25", "tests/plan", "-x"]]
    assert not (fake.parent / "prepared").exists()


def test_a_killed_run_interrupts_both_so_they_tear_their_clusters_down(fake: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM to the runner (CI's timeout) reaches both pytest processes as SIGINT (pytest's Ctrl-C: fixtures tear
    down; killed outright, they would leave their clusters running), even where SIGINT was ignored (a background
    job's is)."""
    monkeypatch.setenv("FAKE_INTERRUPT", "1")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(SystemExit) as exc:
            suite.main([])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert exc.value.code == 128 + signal.SIGTERM
    assert sorted(Path(f"{fake}.down").read_text().splitlines()) == ["rest torn down", "scenario torn down"]
    assert signal.getsignal(signal.SIGTERM) is not suite._exit_on_term  # the runner's handler is put back
