"""A minimal Hugging Face hub endpoint for the model role's tests (HF_ENDPOINT=http://ADDRESS:PORT).

Serves ONE directory as ONE private model repository at ONE branch, with just the endpoints `hf download`
(huggingface_hub's snapshot_download with a local dir) calls, answering the way the hub does:

- ``GET /api/models/{repo}/revision/{rev}``: the repository's commit (``sha``) and file list;
- ``GET /api/models/{repo}/tree/{commit}``: every file with its size and LFS sha256 (one page);
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: the file, with ``X-Repo-Commit``, a sha256 ``ETag``,
  ``Content-Length`` and ``Range`` requests (206 ``Content-Range``), as a direct 200 (no CDN redirect, no Xet).

Errors carry the hub's ``X-Error-Code``/``X-Error-Message`` headers, which huggingface_hub turns into its typed
errors: a wrong token is 401 "Invalid credentials in Authorization header"; no token is 401 ``RepoNotFound``
(a private repository); an unknown repository 404 ``RepoNotFound``; an unknown revision 404
``RevisionNotFound``; an unknown file 404 ``EntryNotFound``.

For the tests: every request is recorded (method, path, Range, whether a token came; never the token itself);
``drop(path, after)`` makes the next GET of a file send its headers and ``after`` bytes, then close the
connection; ``hold(path)`` makes the next GET of a file wait, after ``after`` bytes, until the test releases
it (to look at the host while the download runs, or to interrupt it). It listens on loopback or on the address a
test gives (its own sim bridge), nowhere else.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

HOLD_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # the URL path, decoded, without the query
    range: str | None  # the Range header, if any
    with_token: bool  # an Authorization header came (its value is never kept)
    status: int


@dataclass
class Hold:
    after: int  # bytes sent before waiting
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


@dataclass
class HubRepo:
    """The repository: ``repo_id`` at branch ``revision``, its files read from ``root`` (a commit id is derived
    from their contents, so changing a file makes a new commit)."""

    root: Path
    repo_id: str
    token: str
    revision: str = "main"

    def files(self) -> dict[str, Path]:
        return {p.relative_to(self.root).as_posix(): p for p in sorted(self.root.rglob("*")) if p.is_file()}

    def commit(self) -> str:
        h = hashlib.sha1()
        for rel, path in self.files().items():
            h.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
        return h.hexdigest()


class HubServer:
    """The endpoint on ``address`` (loopback by default, or a test's own bridge address); use :func:`serve`."""

    def __init__(self, repo: HubRepo, address: str = "127.0.0.1") -> None:
        if not ipaddress.ip_address(address).is_private:
            raise ValueError(f"the test hub listens on loopback or a test bridge only, not {address}")
        self.repo = repo
        self.requests: list[Request] = []
        self._drops: dict[str, list[int]] = {}
        self._holds: dict[str, Hold] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((address, 0), self._handler())
        self._httpd.daemon_threads = True
        self.url = f"http://{address}:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="hubserver", daemon=True)

    # -- control (tests) -------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            for hold in self._holds.values():
                hold.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def drop(self, path: str, after: int, times: int = 1) -> None:
        """The next ``times`` GETs of ``path`` send ``after`` bytes of the body, then close the connection."""
        with self._lock:
            self._drops[path] = [after] * times

    def hold(self, path: str, after: int = 0) -> Hold:
        """The next GET of ``path`` sends ``after`` bytes, then waits until ``Hold.release`` is set."""
        hold = Hold(after)
        with self._lock:
            self._holds[path] = hold
        return hold

    def clear_log(self) -> None:
        with self._lock:
            self.requests.clear()

    def gets(self, path: str | None = None) -> list[Request]:
        """The GETs of files (resolve), optionally of one path."""
        with self._lock:
            return [r for r in self.requests if r.method == "GET" and "/resolve/" in r.path
                    and (path is None or r.path.endswith("/" + path))]

    # -- serving ---------------------------------------------------------------------------------------------
    def _record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def _take_fault(self, path: str) -> tuple[int | None, Hold | None]:
        with self._lock:
            drops = self._drops.get(path)
            drop = drops.pop(0) if drops else None
            return drop, self._holds.pop(path, None)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet: the log is ours
                return

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            # One response, recorded.
            def _reply(self, status: int, headers: dict[str, str], body: bytes = b"", send: bool = True) -> None:
                self.send_response(status)
                for k, v in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                if send and body:
                    self.wfile.write(body)

            def _error(self, status: int, code: str | None, message: str, send: bool) -> None:
                headers = {"Content-Type": "application/json", "X-Error-Message": message}
                if code:
                    headers["X-Error-Code"] = code
                self._reply(status, headers, json.dumps({"error": message}).encode(), send)

            def _serve(self, body: bool) -> None:
                path = unquote(urlsplit(self.path).path)
                status = self._route(path, body)
                server._record(Request(self.command, path, self.headers.get("Range"),
                                       "Authorization" in self.headers, status))

            def _authorized(self, send: bool) -> bool:
                auth = self.headers.get("Authorization")
                if auth is None:  # a private repository: the hub hides it
                    self._error(401, "RepoNotFound", "Repository not found", send)
                    return False
                if auth != f"Bearer {server.repo.token}":
                    self._error(401, None, "Invalid credentials in Authorization header", send)
                    return False
                return True

            def _route(self, path: str, send: bool) -> int:
                repo = server.repo
                api = f"/api/models/{repo.repo_id}/"
                resolve = f"/{repo.repo_id}/resolve/"
                if not (path.startswith(api) or path.startswith(resolve)):
                    self._error(404, "RepoNotFound", "Repository not found", send)
                    return 404
                if not self._authorized(send):
                    return 401
                commit = repo.commit()
                if path.startswith(api):
                    kind, _, rest = path[len(api):].partition("/")
                    rev = rest.split("/", 1)[0]
                else:
                    kind, (rev, _, rest) = "resolve", path[len(resolve):].partition("/")
                if rev not in (repo.revision, commit):
                    self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", send)
                    return 404
                headers = {"X-Repo-Commit": commit}
                files = repo.files()
                if kind == "revision":
                    info = {"id": repo.repo_id, "modelId": repo.repo_id, "sha": commit, "private": True,
                            "siblings": [{"rfilename": f} for f in files]}
                    self._reply(200, headers | {"Content-Type": "application/json"}, json.dumps(info).encode(), send)
                    return 200
                if kind == "tree":
                    tree = []
                    for rel, p in files.items():
                        data = p.read_bytes()
                        oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                        lfs = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                        tree.append({"type": "file", "path": rel, "size": len(data), "oid": oid, "lfs": lfs})
                    self._reply(200, headers | {"Content-Type": "application/json"}, json.dumps(tree).encode(), send)
                    return 200
                if kind == "resolve" and rest in files:
                    return self._file(files[rest], rest, headers, send)
                self._error(404, "EntryNotFound", f"{rest} does not exist on {rev}", send)
                return 404

            def _file(self, p: Path, rel: str, headers: dict[str, str], send: bool) -> int:
                data = p.read_bytes()
                start, status = 0, 200
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng[6:].split("-")[0].isdigit():
                    start, status = int(rng[6:].split("-")[0]), 206
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                headers |= {"ETag": f'"{hashlib.sha256(data).hexdigest()}"', "Accept-Ranges": "bytes",
                            "Content-Type": "application/octet-stream"}
                part = data[start:]
                if not send:
                    headers["Content-Length"] = str(len(part))
                    self._reply(status, headers, send=False)
                    return status
                drop, hold = server._take_fault(rel)
                self.send_response(status)
                for k, v in (headers | {"Content-Length": str(len(part))}).items():
                    self.send_header(k, v)
                self.end_headers()
                if hold is not None:
                    self.wfile.write(part[:hold.after])
                    self.wfile.flush()
                    hold.arrived.set()
                    hold.release.wait(HOLD_TIMEOUT_S)
                    part = part[hold.after:]
                if drop is not None:
                    self.wfile.write(part[:drop])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return status
                self.wfile.write(part)
                return status

        return Handler


@contextmanager
def serve(repo: HubRepo, address: str = "127.0.0.1") -> Iterator[HubServer]:
    """The endpoint, running until the block ends (also when a test fails)."""
    server = HubServer(repo, address)
    server.start()
    try:
        yield server
    finally:
        server.stop()
