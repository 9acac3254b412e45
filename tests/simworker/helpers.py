"""Test helpers: one simulated worker process, a router-less PD request, polling."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pdfleet_sim.testing.localpd import HOST, REPO_ROOT, free_port, http_get, http_json, stop_process
from pdfleet_sim.testing.simclient import chat_body


class Worker:
    """One ``python -m pdfleet_sim.worker`` process on loopback; always stopped by ``close``."""

    def __init__(self, python: str, env: Mapping[str, str], log: Path, argv: Sequence[str] = (),
                 port: int | None = None) -> None:
        import os

        self.port = free_port() if port is None else port
        self.url = f"http://{HOST}:{self.port}"
        self.log = log
        cmd = [python, "-m", "pdfleet_sim.worker", "--model-path", "/models/dsv4-sim", "--served-model-name",
               "dsv4-sim", "--host", HOST, "--port", str(self.port), "--enable-metrics", *argv]
        with log.open("wb") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                         start_new_session=True, cwd=str(REPO_ROOT))
        try:
            wait_until(lambda: self._up(), 60, f"worker on {self.url} (log {log})")
        except BaseException:
            self.close()
            raise

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"worker exited {self.proc.returncode}:\n{self.log.read_text()}")
        try:
            return http_get(self.url + "/health", timeout=1)[0] == 200
        except OSError:
            return False

    def state(self) -> dict[str, Any]:
        return json.loads(http_get(self.url + "/pdfleet/sim")[1])

    def close(self) -> None:
        stop_process(self.proc)


def wait_until(pred: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def chat_status(gateway_url: str, model: str) -> int:
    """One short chat request through a gateway: its HTTP status, or 0 when the connection failed."""
    req = urllib.request.Request(gateway_url + "/v1/chat/completions", data=json.dumps(chat_body(model, "hi", 4, False))
                                 .encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def prefill_peers(decode_url: str) -> dict[str, int]:
    """The simulated decode's count of requests per prefill bootstrap address it was paired with."""
    return json.loads(http_get(decode_url + "/pdfleet/sim")[1])["prefill_peers"]


def stage_counts(url: str) -> dict[str, int]:
    return json.loads(http_get(url + "/pdfleet/sim")[1])["stages"]


def pd_request(prefill: str, decode: str, bootstrap_port: int, path: str, body: dict[str, Any],
               timeout: float = 30.0, room: int | None = None) -> tuple[int, Any]:
    """What the router does: the same body plus bootstrap fields to both workers; decode's answer."""
    room = random.getrandbits(63) if room is None else room
    full = {**body, "bootstrap_host": HOST, "bootstrap_port": bootstrap_port, "bootstrap_room": room}
    out: dict[str, Any] = {}

    def to_prefill() -> None:
        try:
            out["prefill"] = http_json(prefill + path, full, timeout=timeout)
        except OSError as e:
            out["prefill"] = (0, str(e))

    t = threading.Thread(target=to_prefill, daemon=True)
    t.start()
    try:
        status, res = http_json(decode + path, full, timeout=timeout)
    except OSError as e:  # a timeout: the request hangs
        return 0, str(e)
    t.join(timeout)
    return status, res


def open_and_drop(url: str, path: str, body: dict[str, Any], held: Callable[[], object], what: str,
                  timeout: float = 30.0) -> None:
    """Send a request on a raw socket and close the connection once ``held()`` is true (the worker(s) hold the
    request, named ``what``): a client killed while its request is in flight."""
    raw = json.dumps(body).encode()
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)))
    try:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
        wait_until(lambda: bool(held()), timeout, what, interval=0.02)
    finally:
        s.close()
