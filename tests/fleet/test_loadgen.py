"""The client load's verdict reads the answer, not only its framing: a stream that SGLang ended with an error
chunk (a worker shutting down mid-request) still ends with ``[DONE]``, and an aborted request still has usage.
The streams are served over HTTP and read by the load's own reader (``pdfleet_sim.testing.simclient``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pdfleet_sim.testing.simclient import chat_body, stream_chat

from .loadgen import judge_stream, judge_whole

TOKEN = {"choices": [{"index": 0, "delta": {"content": "tok"}, "finish_reason": None}]}
LENGTH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
ABORT = {"choices": [{"index": 0, "delta": {}, "finish_reason": {"type": "abort"}}]}
ERROR = {"error": {"message": "The server is shutting down.", "type": "internal_server_error", "code": 503}}


def _sse(*chunks: object, done: bool = True) -> bytes:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + ("data: [DONE]\n\n" if done else "")
    return body.encode()


@pytest.fixture(scope="module")
def serve() -> Iterator[dict[str, bytes]]:
    """path -> the SSE body served there (a 200 stream, closed after the body)."""
    bodies: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = bodies[self.path]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    bodies["base"] = f"http://127.0.0.1:{server.server_address[1]}".encode()
    yield bodies
    server.shutdown()


def _judge(serve: dict[str, bytes], body: bytes) -> tuple[str, str]:
    path = f"/s{len(serve)}"
    serve[path] = body
    return judge_stream(stream_chat(serve["base"].decode() + path, chat_body("m", "hi", 8, True), 10))


def test_a_whole_stream_is_ok(serve: dict[str, bytes]) -> None:
    assert _judge(serve, _sse(TOKEN, TOKEN, LENGTH)) == ("ok", "")


@pytest.mark.parametrize(("body", "kind", "evidence"), [
    (_sse(TOKEN, ERROR), "cut", "shutting down"),  # tokens, then the worker went away: [DONE] all the same
    (_sse(ERROR), "failed", "shutting down"),
    (_sse(TOKEN, ABORT), "cut", "finish reason abort"),
    (_sse(TOKEN), "cut", "finish reason None"),
    (_sse(TOKEN, done=False), "cut", "finish reason None"),  # the connection closed mid-stream
])
def test_a_stream_that_lost_its_answer_is_not_ok(serve: dict[str, bytes], body: bytes, kind: str,
                                                 evidence: str) -> None:
    got, detail = _judge(serve, body)
    assert got == kind and evidence in detail, (got, detail)


def test_no_connection_fails() -> None:
    got, _ = judge_stream(stream_chat("http://127.0.0.1:9/v1/chat/completions", chat_body("m", "hi", 8, True), 5))
    assert got == "failed"


def test_whole_answers() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 2}
    ok = {"choices": [{"message": {"content": "ab"}, "finish_reason": "length"}], "usage": usage}
    assert judge_whole(json.dumps(ok)) == ("ok", "")
    aborted = {"choices": [{"message": {"content": "a"}, "finish_reason": {"type": "abort"}}], "usage": usage}
    assert judge_whole(json.dumps(aborted))[0] == "cut"
    assert judge_whole(json.dumps({"object": "error", "message": "x"}))[0] == "failed"
    assert judge_whole("<html>bad gateway</html>")[0] == "failed"
