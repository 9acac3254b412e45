"""A small OpenAI-compatible streaming client, standard library only.

``python -m pdfleet_sim.testing.simclient sessions --url URL -n 60`` opens ``n`` concurrent streaming chat
sessions (like a parallel agent's tool calls) and prints one line per event (``open i``,
``first-token i``, ``done i``, ``error i …``), flushing each, until every session ended or the
process is killed. Killing it with SIGKILL drops every connection at once: the abort cascade.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class StreamResult:
    status: int
    chunks: int
    text: str
    completion_id: str | None
    model: str | None
    usage: dict[str, Any] | None
    finish_reason: str | None
    first_token_s: float | None
    total_s: float
    error: str | None = None


def chat_body(model: str, prompt: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def stream_chat(
    url: str,
    body: dict[str, Any],
    timeout_s: float = 60.0,
    on_event: Callable[[str], None] | None = None,
    api_key: str | None = None,
) -> StreamResult:
    """POST a streaming chat request to ``url`` (…/v1/chat/completions) and read it to the end (with ``api_key`` as
    a bearer token, for a router started with one)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout_s)
    started = time.monotonic()
    first: float | None = None
    text, chunks, cid, model, usage, finish = "", 0, None, None, None, None
    try:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        conn.request("POST", parts.path or "/", body=json.dumps(body), headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            return StreamResult(resp.status, 0, "", None, None, None, None, None, time.monotonic() - started,
                                error=resp.read().decode(errors="replace")[:500])
        if on_event:
            on_event("open")
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            obj = json.loads(data)
            if "error" in obj:
                return StreamResult(resp.status, chunks, text, cid, model, usage, finish, first,
                                    time.monotonic() - started, error=json.dumps(obj["error"])[:500])
            chunks += 1
            cid = obj.get("id", cid)
            model = obj.get("model", model)
            usage = obj.get("usage") or usage
            for choice in obj.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece and first is None:
                    first = time.monotonic() - started
                    if on_event:
                        on_event("first-token")
                text += piece
                finish = choice.get("finish_reason") or finish
        return StreamResult(200, chunks, text, cid, model, usage, finish, first, time.monotonic() - started)
    except (OSError, http.client.HTTPException, ValueError) as e:
        return StreamResult(0, chunks, text, cid, model, usage, finish, first, time.monotonic() - started,
                            error=f"{type(e).__name__}: {e}")
    finally:
        conn.close()


def run_sessions(url: str, n: int, model: str, prompt: str, max_tokens: int, timeout_s: float) -> int:
    lock = threading.Lock()

    def emit(line: str) -> None:
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    results: list[StreamResult | None] = [None] * n

    def one(i: int) -> None:
        res = stream_chat(url, chat_body(model, prompt, max_tokens, True), timeout_s,
                          on_event=lambda ev: emit(f"{ev} {i}"))
        results[i] = res
        emit(f"done {i} status={res.status} chunks={res.chunks}" if res.error is None
             else f"error {i} {res.error}")

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0 if all(r is not None and r.error is None for r in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pdfleet_sim.testing.simclient")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sessions", help="n concurrent streaming chat sessions")
    s.add_argument("--url", required=True, help="the chat completions URL")
    s.add_argument("-n", type=int, default=60)
    s.add_argument("--model", default="default")
    s.add_argument("--prompt", default="Call the tool.")
    s.add_argument("--prompt-repeat", type=int, default=1, help="repeat the prompt to make it long")
    s.add_argument("--max-tokens", type=int, default=512)
    s.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args(argv)
    return run_sessions(a.url, a.n, a.model, a.prompt * a.prompt_repeat, a.max_tokens, a.timeout)


if __name__ == "__main__":
    sys.exit(main())
