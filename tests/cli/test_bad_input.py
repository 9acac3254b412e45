"""Every `pdfleet` subcommand given bad input: exit 2, one line on stderr, no traceback (issue 11 item 6).

Each row runs the real command line in-process; an exception that escapes ``pdfleet.cli.main`` fails the
test with its traceback. Nothing here reaches a network beyond 127.0.0.1 ports nobody listens on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pdfleet.cli import main
from pdfleet.paths import REPO_ROOT

# A path no tool creates (a stray /nonexistent directory once existed on a CI machine).
MISSING = "/nonexistent/pdfleet-no-such-inventory"

SIM_INV = str(REPO_ROOT / "inventory" / "sim")
EXPLICIT = ["--router", "http://127.0.0.1:1", "--prefill", "http://127.0.0.1:2", "--decode", "http://127.0.0.1:3"]


def _files(tmp: Path) -> dict[str, str]:
    (tmp / "list.json").write_text(json.dumps([1, 2]))
    (tmp / "notjson.json").write_text("{not json")
    (tmp / "partial.json").write_text(json.dumps({"schema": "pdfleet-verify/1", "checks": "x"}))
    (tmp / "afile").write_text("x")
    (tmp / "journal").mkdir()
    names = ("list.json", "notjson.json", "partial.json", "afile", "journal")
    return {k.replace(".", "_"): str(tmp / k) for k in names}


# (id, argv with {placeholders}, a fragment the one line must contain)
CASES: list[tuple[str, list[str], str]] = [
    ("no-command", [], "required"),
    ("unknown-command", ["bogus"], "invalid choice"),
    ("plan-missing-inventory", ["plan", "-i", MISSING], "inventory not found"),
    ("plan-unknown-flag", ["plan", "--bogus"], "unrecognized arguments"),
    ("launchcheck-unknown-pin", ["launchcheck", "-i", SIM_INV, "--sglang", "0.4.0"], "not a pinned SGLang version"),
    ("render-no-output", ["render", "-i", SIM_INV], "-o/--output"),
    ("keygen-unknown-name", ["keygen", "HF_TOKEN"], "invalid choice"),
    ("render-output-is-a-file", ["render", "-i", SIM_INV, "-o", "{afile}"], "is a file"),
    ("render-output-unwritable", ["render", "-i", SIM_INV, "-o", "/proc/pdfleet-nope"], "cannot write"),
    ("render-missing-inventory", ["render", "-i", MISSING, "-o", "{journal}"], "inventory not found"),
    ("patch-no-subcommand", ["patch"], "required"),
    ("patch-check-unknown-version", ["patch", "check", "--sglang-version", "9.9.9"], "no NIXL patch"),
    ("patch-check-no-version", ["patch", "check"], "--sglang-version"),
    ("patch-status-missing-inventory", ["patch", "status", "-i", MISSING], "inventory not found"),
    ("sim-no-subcommand", ["sim"], "required"),
    ("sim-up-bad-cidr", ["sim", "up", "--cidr", "bogus"], "bogus"),
    ("sim-up-bad-gateway", ["sim", "up", "--gateway", "10.1"], "10.1"),
    ("sim-up-bad-count", ["sim", "up", "--count", "0"], "1 or more"),
    ("sim-up-bad-host", ["sim", "up", "--host", "node1"], "NAME=ADDRESS"),
    ("sim-up-missing-inventory", ["sim", "up", "-i", MISSING], "inventory not found"),
    ("sim-down-missing-inventory", ["sim", "down", "-i", MISSING], "inventory not found"),
    ("sim-status-missing-inventory", ["sim", "status", "-i", MISSING], "inventory not found"),
    ("conformance-missing-inventory", ["conformance", "-i", MISSING], "inventory not found"),
    ("rollout-no-subcommand", ["rollout"], "required"),
    ("rollout-plan-missing-inventory", ["rollout", "plan", "-i", MISSING], "inventory not found"),
    ("rollout-status-missing-inventory", ["rollout", "status", "-i", MISSING], "inventory not found"),
    ("ops-no-subcommand", ["ops"], "required"),
    ("ops-status-missing-inventory", ["ops", "status", "-i", MISSING], "inventory not found"),
    ("ops-logs-no-unit", ["ops", "logs", "-i", SIM_INV], "unit"),
    ("ops-restart-unknown-pair", ["ops", "restart", "-i", SIM_INV, "nohost"], "no pair on host 'nohost'"),
    ("watchdog-no-subcommand", ["watchdog"], "required"),
    ("watchdog-run-missing-inventory", ["watchdog", "run", "-i", MISSING], "inventory not found"),
    ("watchdog-status-not-json", ["watchdog", "status", "--state-file", "{notjson_json}"], "cannot read"),
    ("watchdog-status-a-list", ["watchdog", "status", "--state-file", "{list_json}"], "not a watchdog state"),
    ("verify-missing-inventory", ["verify", "-i", MISSING], "inventory not found"),
    ("verify-negative-cycles", ["verify", "--cycles", "-1"], "0 or more"),
    ("verify-zero-concurrency", ["verify", "--concurrency", "0"], "above 0"),
    ("verify-not-a-number", ["verify", "--window", "soon"], "soon"),
    ("verify-bad-kill-mode", ["verify", "--kill-mode", "all"], "invalid choice"),
    ("verify-router-without-workers", ["verify", "--router", "http://127.0.0.1:1"], "--prefill"),
    ("verify-workers-without-router", ["verify", "--prefill", "http://127.0.0.1:1"], "--router"),
    ("verify-bad-log-file", ["verify", *EXPLICIT, "--log-file", "nope"], "WORKER=PATH"),
    ("verify-log-file-unknown-worker", ["verify", *EXPLICIT, "--log-file", "other=/x"], "unknown worker"),
    ("verify-report-is-a-dir", ["verify", *EXPLICIT, "--report", "{journal}"], "is a directory"),
    ("verify-report-unwritable", ["verify", *EXPLICIT, "--report", "/proc/pdfleet-nope/r.json"], "cannot write"),
    ("verify-report-under-a-file", ["verify", *EXPLICIT, "--report", "{afile}/r.json"], "cannot write"),
    ("verify-resume-no-journal", ["verify", "--resume", "{list_json}"], "--journal-dir"),
    ("verify-resume-journal-missing", ["verify", "--resume", "{list_json}", "--journal-dir", MISSING],
     "no such directory"),
    ("verify-resume-json-list", ["verify", "--resume", "{list_json}", "--journal-dir", "{journal}"], "JSON list"),
    ("verify-resume-not-json", ["verify", "--resume", "{notjson_json}", "--journal-dir", "{journal}"],
     "notjson.json"),
    ("verify-resume-partial", ["verify", "--resume", "{partial_json}", "--journal-dir", "{journal}"],
     "not a complete pdfleet verify report"),
    ("verify-resume-missing-file", ["verify", "--resume", "/nonexistent.json", "--journal-dir", "{journal}"],
     "/nonexistent.json"),
    ("verify-defer-with-logs", ["verify", *EXPLICIT, "--defer-logs", "--journal-dir", "{journal}"],
     "--defer-logs"),
]


@pytest.mark.parametrize(("argv", "fragment"), [(a, f) for _, a, f in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], fragment: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    files = _files(tmp_path)
    args = [a.format(**files) if "{" in a else a for a in argv]
    try:
        rc = main(args)
    except SystemExit as e:  # argparse
        rc = e.code
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert rc == 2, captured.err
    assert len(lines) == 1, f"expected one line, got:\n{captured.err}"
    assert "Traceback" not in captured.err + captured.out
    assert fragment in lines[0], lines[0]
    assert lines[0].startswith("pdfleet")


def test_every_subcommand_has_a_row() -> None:
    from pdfleet.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    covered = {argv[0] for _, argv, _ in CASES if argv}
    assert set(sub.choices) <= covered, f"no bad-input row for {set(sub.choices) - covered}"
