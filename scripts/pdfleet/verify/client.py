"""A minimal HTTP/1.1 client on asyncio streams: plain requests, and SSE sessions that can be killed.

Standard library only (the project avoids new dependencies). One connection per request
(``Connection: close``), ``Content-Length`` and ``chunked`` bodies, ``http://`` only. A
:class:`StreamSession` reads an OpenAI-style server-sent-event stream and records when it opened, when the
first token came and how many tokens it saw; :meth:`StreamSession.kill` drops the connection at once
(TCP RST with ``SO_LINGER 0`` by default, like a killed client with unread data), which the router and
the workers see as a client disconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_HEADER_BYTES = 64 * 1024


# The router's API key, by the address it is sent to (``set_bearer``): every request and stream to that
# host:port carries ``Authorization: Bearer <key>``; requests to other addresses (the workers) carry none. Kept
# here, in the process only: never in the settings or the report, never on a command line.
_BEARER: dict[tuple[str, int], str] = {}


def set_bearer(url: str, key: str) -> None:
    """Send ``key`` as a bearer token with every request to ``url``'s host and port (the router)."""
    host, port, _ = split_url(url)
    _BEARER[(host, port)] = key


def _auth(host: str, port: int) -> dict[str, str]:
    key = _BEARER.get((host, port))
    return {"Authorization": f"Bearer {key}"} if key else {}


class HTTPClientError(Exception):
    """The server could not be reached, or answered something that is not HTTP/1.x."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    elapsed_s: float

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


def split_url(url: str) -> tuple[str, int, str]:
    """``http://host:port/path?q`` -> (host, port, "/path?q")."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise HTTPClientError(f"{url!r}: only http://host[:port]/path URLs are supported")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return parts.hostname, parts.port or 80, target


def _request_bytes(method: str, host: str, port: int, target: str, body: bytes | None,
                   headers: Mapping[str, str]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}", "Connection: close",
             "User-Agent: pdfleet-verify"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        raise HTTPClientError("connection closed before the response headers") from e
    except asyncio.LimitOverrunError as e:
        raise HTTPClientError("response headers too large") from e
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HTTPClientError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


async def iter_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
    """The body's bytes as they arrive (chunked, Content-Length, or until EOF)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readline()
            if not size_line:
                return
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    elif "content-length" in headers:
        remaining = int(headers["content-length"])
        while remaining > 0:
            data = await reader.read(min(remaining, 65536))
            if not data:
                raise HTTPClientError(f"connection closed with {remaining} body bytes missing")
            remaining -= len(data)
            yield data
    else:
        while data := await reader.read(65536):
            yield data


class RequestTimeout(HTTPClientError, TimeoutError):
    """No answer within the deadline; still a TimeoutError for callers that catch that."""


async def _open(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        return await asyncio.open_connection(host, port, limit=MAX_HEADER_BYTES)
    except OSError as e:
        raise HTTPClientError(f"cannot connect to {host}:{port}: {e}") from e


async def request(url: str, method: str = "GET", json_body: Any = None, timeout_s: float = 10.0,
                  headers: Mapping[str, str] | None = None) -> Response:
    """One request, the whole body read; raises HTTPClientError (RequestTimeout: "no answer within N s")."""
    host, port, target = split_url(url)
    body = None if json_body is None else json.dumps(json_body).encode()
    hdrs = {**_auth(host, port), **(headers or {})}
    if body is not None:
        hdrs.setdefault("Content-Type", "application/json")
    started = time.monotonic()

    async def go() -> Response:
        reader, writer = await _open(host, port)
        try:
            writer.write(_request_bytes(method, host, port, target, body, hdrs))
            await writer.drain()
            status, rh = await _read_head(reader)
            data = b"".join([chunk async for chunk in iter_body(reader, rh)])
            return Response(status, rh, data, time.monotonic() - started)
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            raise HTTPClientError(f"{method} {url}: {type(e).__name__}: {e}") from e
        finally:
            writer.transport.abort()

    try:
        return await asyncio.wait_for(go(), timeout_s)
    except TimeoutError as e:
        raise RequestTimeout(f"{method} {url}: no answer within {timeout_s:g} s") from e


def chat_body(model: str, prompt: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens, "stream": stream, "temperature": 0}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


@dataclass
class SSEParser:
    """Turns body bytes into ``data:`` payloads (one per event)."""

    buf: bytes = b""

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data.replace(b"\r\n", b"\n")
        out: list[bytes] = []
        while b"\n\n" in self.buf:
            event, self.buf = self.buf.split(b"\n\n", 1)
            payload = b"\n".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
            if payload:
                out.append(payload)
        return out


# What a session was doing when it was killed (or how it ended).
PHASES = ("connecting", "waiting-headers", "before-first-token", "streaming", "completed", "failed")


@dataclass
class StreamSession:
    """One streaming chat completion; run() reads it, kill() drops it."""

    index: int
    url: str
    body: dict[str, Any]
    rst: bool = True
    started: float = 0.0
    sent_s: float | None = None  # the request is on the wire: the session is open
    headers_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    status: int = 0
    tokens: int = 0
    completion_id: str | None = None
    model: str | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    killed_phase: str | None = None
    phase: str = "connecting"
    _writer: asyncio.StreamWriter | None = field(default=None, repr=False)
    _token_times: list[float] = field(default_factory=list, repr=False)

    @property
    def killed(self) -> bool:
        return self.killed_phase is not None

    @property
    def done(self) -> bool:
        return self.phase in ("completed", "failed") or self.killed

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first."""
        if len(self._token_times) < 2:
            return None
        return (self._token_times[-1] - self._token_times[0]) / (len(self._token_times) - 1)

    async def run(self) -> None:
        self.started = time.monotonic()
        host, port, target = split_url(self.url)
        payload = json.dumps(self.body).encode()
        try:
            reader, self._writer = await _open(host, port)
            if self.killed:  # killed while connecting
                self._writer.transport.abort()
                return
            self.phase = "waiting-headers"
            self._writer.write(_request_bytes("POST", host, port, target, payload,
                                              {"Content-Type": "application/json", "Accept": "text/event-stream",
                                               **_auth(host, port)}))
            await self._writer.drain()
            self.sent_s = time.monotonic() - self.started
            self.status, headers = await _read_head(reader)
            self.headers_s = time.monotonic() - self.started
            self.phase = "before-first-token"
            if self.status != 200:
                body = b"".join([c async for c in iter_body(reader, headers)])
                self._end("failed", f"HTTP {self.status}: {body[:300].decode(errors='replace')}")
                return
            await self._read_events(reader, headers)
        except (HTTPClientError, OSError, asyncio.IncompleteReadError, ValueError) as e:
            if not self.killed:
                self._end("failed", f"{type(e).__name__}: {e}")
        finally:
            if self._writer is not None:
                self._writer.transport.abort()

    async def _read_events(self, reader: asyncio.StreamReader, headers: Mapping[str, str]) -> None:
        parser = SSEParser()
        async for chunk in iter_body(reader, headers):
            for data in parser.feed(chunk):
                if data == b"[DONE]":
                    self._end("completed")
                    return
                self._on_event(json.loads(data))
                if self.phase == "failed":
                    return
        self._end("completed" if self.tokens else "failed", None if self.tokens else "stream ended without tokens")

    def _on_event(self, obj: dict[str, Any]) -> None:
        if "error" in obj:
            self._end("failed", json.dumps(obj["error"])[:300])
            return
        self.completion_id = obj.get("id", self.completion_id)
        self.model = obj.get("model", self.model)
        self.usage = obj.get("usage") or self.usage
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content") or choice.get("text"):
                now = time.monotonic()
                self.tokens += 1
                self._token_times.append(now)
                if self.first_token_s is None:
                    self.first_token_s = now - self.started
                    self.phase = "streaming"

    def _end(self, phase: str, error: str | None = None) -> None:
        if self.end_s is None:
            self.end_s = time.monotonic() - self.started
            self.phase = phase
            self.error = error

    def kill(self) -> bool:
        """Drop the connection now; False if the session had already ended."""
        if self.done:
            return False
        self.killed_phase = self.phase
        self.end_s = time.monotonic() - self.started if self.started else 0.0
        if self._writer is not None:
            sock = self._writer.get_extra_info("socket")
            if self.rst and sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._writer.transport.abort()
        return True
