"""Abort evidence on a monolithic (mono-tp8) cluster, as real SGLang leaves it (issue 14).

A mono server notices a departed OpenAI client in the tokenizer's wait loop and aborts it
(tokenizer_manager.abort_request: 0.5.15.post1 tokenizer_manager.py:1677-1692, 0.5.23 :2241-2265). That path logs
nothing at info level (only the scheduler's debug ``Abort queued|running request.``; ``[http_server] Client
disconnected`` is logged for native ``/generate`` streams), but it always counts
``sglang:num_aborted_requests_total``. So on mono the counter's increase is the evidence, and there is no KV
transfer to abort.
"""

from __future__ import annotations

from pathlib import Path

from pdfleet.verify.logs import FileLogs, logs_check
from pdfleet.verify.settings import Settings
from pdfleet.verify.targets import Worker

MONO = Worker("mono0", "mono", "http://m")


def _check(tmp_path: Path, log: str, aborted: float) -> tuple[str, str]:
    (tmp_path / "m.log").write_text(log)
    deltas = {"mono0": {"sglang:num_aborted_requests_total": aborted, "sglang:num_bootstrap_failed_reqs_total": 0.0,
                        "sglang:num_transfer_failed_reqs_total": 0.0}}
    r = logs_check([MONO], FileLogs({"mono0": tmp_path / "m.log"}), Settings(), deltas)
    return r.status, r.summary


def test_the_abort_counter_alone_is_evidence_on_mono(tmp_path: Path) -> None:
    status, summary = _check(tmp_path, "POST /v1/chat/completions\n", 37.0)
    assert status == "pass" and "37 aborts" in summary


def test_no_abort_at_all_proves_nothing_on_mono(tmp_path: Path) -> None:
    status, summary = _check(tmp_path, "POST /v1/chat/completions\n", 0.0)
    assert status == "inconclusive" and "did not exercise the abort path" in summary


def test_a_thread_death_still_fails_on_mono(tmp_path: Path) -> None:
    status, _ = _check(tmp_path, "Exception in thread Thread-3:\n", 5.0)
    assert status == "fail"
