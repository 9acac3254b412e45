"""Small fake workers and a fake router (http.server threads on 127.0.0.1) for the fleet unit tests."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeWorker:
    """Serves /v1/loads and /metrics from ``loads`` / ``metrics_text`` (None: 404), and a chat answer."""

    loads: Any = None
    metrics_text: str | None = None
    chats: list[dict[str, Any]] = field(default_factory=list)
    version: str | None = None  # what /server_info reports (None: 404)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeWorker:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: Any, ctype: str = "application/json") -> None:
                raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                if self.path.startswith("/v1/loads") and fake.loads is not None:
                    self._send(200, fake.loads)
                elif self.path == "/metrics" and fake.metrics_text is not None:
                    self._send(200, fake.metrics_text, "text/plain")
                elif self.path == "/server_info" and fake.version is not None:
                    self._send(200, {"version": fake.version})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.chats.append(body)
                self._send(200, {"id": "chatcmpl-1", "model": body.get("model"), "choices": [],
                                 "usage": {"completion_tokens": 2}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@dataclass
class FakeRouter:
    """The gateway's /workers API with its asynchronous jobs: a change shows after ``lag`` GETs. ``smg``: each
    worker has smg's ``status``; a removal marks it ``draining`` (after ``lag`` GETs) and drops it ``settle``
    GETs later (smg's drain settle); without it, sglang-router 0.3.2's (no status, a removal drops it)."""

    lag: int = 2
    smg: bool = False
    settle: int = 6
    workers: list[dict[str, Any]] = field(default_factory=list)
    pending: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    on_chat: Callable[[], None] | None = None  # what "routing" a chat request does to the workers
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _tick(self) -> None:
        still = []
        for left, op, entry in self.pending:
            if left > 0:
                still.append((left - 1, op, entry))
            elif op == "add":
                self.workers.append(entry)
            elif op == "drain":
                entry["status"] = "draining"
                still.append((self.settle, "remove", entry))
            else:
                self.workers = [w for w in self.workers if w["id"] != entry["id"]]
        self.pending = still

    def start(self) -> FakeRouter:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                fake.calls.append(f"GET {self.path}")
                fake._tick()
                self._send(200, {"workers": fake.workers, "total": len(fake.workers)})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                fake.calls.append(f"POST {self.path} {json.dumps(body, sort_keys=True)}")
                if self.path == "/v1/chat/completions":
                    if fake.on_chat is None:
                        self._send(503, {"error": "no workers"})
                    else:
                        fake.on_chat()
                        self._send(200, {"id": "chatcmpl-2", "usage": {"completion_tokens": 1}})
                    return
                entry = {"id": str(uuid.uuid4()), "priority": 50, "cost": 1.0, "is_healthy": True, "load": 0,
                         "worker_type": body.get("worker_type", "regular"), **body}
                if fake.smg:
                    entry["status"] = "ready"
                fake.pending.append((fake.lag, "add", entry))
                self._send(202, {"status": "accepted", "worker_id": entry["id"]})

            def do_PATCH(self) -> None:  # smg: labels merged, the pairing re-derived at once
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                fake.calls.append(f"PATCH {self.path} {json.dumps(body, sort_keys=True)}")
                wid = self.path.rsplit("/", 1)[1]
                entry = next((w for w in fake.workers if w["id"] == wid), None)
                if entry is None or not fake.smg:
                    self._send(404 if entry is None else 405, {"error": "no"})
                    return
                entry["labels"] = {**entry.get("labels", {}), **body.get("labels", {})}
                self._send(200, {"status": "ok"})

            def do_DELETE(self) -> None:
                wid = self.path.rsplit("/", 1)[1]
                fake.calls.append(f"DELETE {self.path}")
                entry = next((w for w in fake.workers if w["id"] == wid), None)
                if entry is None:
                    self._send(404, {"error": "not found"})
                    return
                fake.pending.append((fake.lag, "drain" if fake.smg else "remove", entry))
                self._send(202, {"status": "accepted"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def sglang_loads(running: int = 0, waiting: int = 0, bootstrap: int = 0, transfer: int = 0,
                 dp: int = 1) -> dict[str, Any]:
    """A /v1/loads?include=core,disagg,queues body shaped like SGLang 0.5.15.post1's (load_snapshot.to_dict)."""
    return {"timestamp": "2026-01-01T00:00:00+00:00", "version": "0.5.15.post1", "loads": [
        {"dp_rank": r, "num_running_reqs": running, "num_waiting_reqs": waiting, "num_used_tokens": 0,
         "disaggregation": {"mode": "prefill", "prefill_bootstrap_queue_reqs": bootstrap,
                            "prefill_inflight_queue_reqs": 0, "decode_prealloc_queue_reqs": 0,
                            "decode_transfer_queue_reqs": transfer, "decode_retracted_queue_reqs": 0},
         "queues": {"waiting": waiting, "grammar": 0, "paused": 0, "retracted": 0}} for r in range(dp)]}


def metrics(active: dict[str, int] | None = None, requests_total: float = 0.0, **gauges: float) -> str:
    """A /metrics body with SGLang's names: gauges by short name (running=...), http_requests_active."""
    names = {"running": "sglang:num_running_reqs", "queue": "sglang:num_queue_reqs",
             "bootstrap": "sglang:num_prefill_bootstrap_queue_reqs",
             "inflight": "sglang:num_prefill_inflight_queue_reqs",
             "prealloc": "sglang:num_decode_prealloc_queue_reqs",
             "transfer": "sglang:num_decode_transfer_queue_reqs"}
    lines = [f'{names[k]}{{model_name="m",tp_rank="0"}} {v}' for k, v in gauges.items()]
    lines.append(f'sglang:num_requests_total{{model_name="m"}} {requests_total}')
    if active is not None:
        lines.append("# TYPE sglang:http_requests_active gauge")
        lines += [f'sglang:http_requests_active{{endpoint="{e}",method="POST"}} {n}' for e, n in active.items()]
    return "\n".join(lines) + "\n"
