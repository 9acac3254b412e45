"""A tiny in-process OpenAI-ish server on asyncio streams for client and cascade tests (no aiohttp)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field


@dataclass
class FakeServer:
    tokens: int = 5
    interval_s: float = 0.01
    first_token_delay_s: float = 0.0
    disconnects: int = 0
    completed: int = 0
    requests: list[dict] = field(default_factory=list)
    port: int = 0
    metrics: str = ""  # the /metrics text (Prometheus format); "" answers 404
    _server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FakeServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=2048)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            _method, path = head.split(" ")[:2]
            length = next((int(line.split(":")[1]) for line in head.split("\r\n")
                           if line.lower().startswith("content-length")), 0)
            body = json.loads(await reader.readexactly(length)) if length else None
            if path == "/health":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            elif path == "/metrics" and self.metrics:
                data = self.metrics.encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
            elif path == "/plain":
                data = b'{"ok": true}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
            elif path == "/v1/chat/completions" and body and body.get("stream"):
                self.requests.append(body)
                await self._stream(writer, body)
            elif path == "/v1/chat/completions":
                self.requests.append(body or {})
                data = json.dumps({"id": "chatcmpl-1", "model": body["model"], "choices": [],
                                   "usage": {"completion_tokens": 3}}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                             % len(data) + data)
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.disconnects += 1
        finally:
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, body: dict) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        await asyncio.sleep(self.first_token_delay_s)
        for i in range(min(self.tokens, body.get("max_tokens", self.tokens))):
            event = json.dumps({"id": "chatcmpl-s", "model": body["model"],
                                "choices": [{"index": 0, "delta": {"content": f"t{i} "}}]})
            self._chunk(writer, f"data: {event}\n\n".encode())
            await writer.drain()
            await asyncio.sleep(self.interval_s)
        self._chunk(writer, b'data: {"id":"chatcmpl-s","choices":[],"usage":{"completion_tokens":%d}}\n\n'
                    % self.tokens)
        self._chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        self.completed += 1

    @staticmethod
    def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(b"%x\r\n" % len(data) + data + b"\r\n")
