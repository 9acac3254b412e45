"""The client load's verdict reads the answer, not only its framing: a stream that SGLang ended with an error
chunk (a worker shutting down mid-request) still ends with ``[DONE]``, and an aborted request still has usage."""

from __future__ import annotations

import json

import pytest

from .loadgen import judge_stream, judge_whole


def _sse(*chunks: object) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


TOKEN = {"choices": [{"index": 0, "delta": {"content": "tok"}, "finish_reason": None}]}
LENGTH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
ERROR = {"error": {"message": "The server is shutting down.", "type": "internal_server_error", "code": 503}}


def test_a_whole_stream_is_ok() -> None:
    assert judge_stream(_sse(TOKEN, TOKEN, LENGTH)) == ("ok", "")


@pytest.mark.parametrize(("data", "kind", "evidence"), [
    (_sse(TOKEN, ERROR), "cut", "shutting down"),  # tokens, then the worker went away: [DONE] all the same
    (_sse(ERROR), "failed", "after 0 token"),
    (_sse(TOKEN, {"choices": [{"index": 0, "delta": {}, "finish_reason": {"type": "abort"}}]}), "cut", "abort"),
    (_sse(TOKEN), "cut", "finish reasons []"),
    ("data: " + json.dumps(TOKEN) + "\n\n", "cut", "no [DONE]"),
])
def test_a_stream_that_lost_its_answer_is_not_ok(data: str, kind: str, evidence: str) -> None:
    got, detail = judge_stream(data)
    assert got == kind and evidence in detail, (got, detail)


def test_whole_answers() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 2}
    ok = {"choices": [{"message": {"content": "ab"}, "finish_reason": "length"}], "usage": usage}
    assert judge_whole(json.dumps(ok)) == ("ok", "")
    aborted = {"choices": [{"message": {"content": "a"}, "finish_reason": {"type": "abort"}}], "usage": usage}
    assert judge_whole(json.dumps(aborted))[0] == "cut"
    assert judge_whole(json.dumps({"object": "error", "message": "x"}))[0] == "failed"
    assert judge_whole("<html>bad gateway</html>")[0] == "failed"
