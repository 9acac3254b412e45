"""Start a prefill + decode pair of simulated workers and a real router on loopback, and stop them.

Used by the tests and by anything that wants a local PD stack in seconds::

    with LocalPD(worker_python=[py], worker_env=env, router=RouterSpec.find(), log_dir=d) as pd:
        post(pd.router_url + "/v1/chat/completions", ...)

Every process runs in its own session and is killed (process group, SIGTERM then SIGKILL) on exit,
even when startup fails. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from pdfleet.paths import REPO_ROOT

HOST = "127.0.0.1"
ROUTER_KINDS = ("smg", "sglang-router")


class LaunchError(RuntimeError):
    """A process of the local PD stack did not come up; the message points at its log."""


# Ports handed out by free_port in this process: never the same one twice (a server may not have bound it yet).
_GIVEN: set[int] = set()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (outgoing connections take their local port there)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port nobody listens on, for a server a test starts next. Chosen below the ephemeral range: a port
    the kernel picks there (bind to port 0) can be taken as an outgoing connection's local port before the server
    binds it, and the server then fails with "Address already in use"."""
    low = _ephemeral_low()
    if low > 20000 + 1000:
        for _ in range(200):
            port = random.randrange(20000, low)
            if port in _GIVEN:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((HOST, port))
                except OSError:
                    continue
            _GIVEN.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port = int(s.getsockname()[1])
    _GIVEN.add(port)
    return port


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_json(url: str, body: Mapping[str, Any] | None = None, timeout: float = 30.0) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


@dataclass(frozen=True)
class RouterSpec:
    """Which router to run: ``smg`` (``smg launch …``) or ``sglang-router`` (``python -m sglang_router…``)."""

    kind: str
    executable: Path  # the smg script, or the python that has sglang_router

    def head(self) -> list[str]:
        """The command line up to the router's own arguments."""
        return [str(self.executable), "launch"] if self.kind == "smg" else \
            [str(self.executable), "-m", "sglang_router.launch_router"]

    def command(self, prefill_url: str, bootstrap_port: int, decode_url: str, port: int,
                extra: Sequence[str] = ()) -> list[str]:
        head = self.head()
        # Both routers also bind a Prometheus exporter (default 29000): give each its own loopback port, or two
        # test stacks on one machine collide and the second router panics at startup.
        return [*head, "--pd-disaggregation", "--prefill", prefill_url, str(bootstrap_port),
                "--decode", decode_url, "--host", HOST, "--port", str(port), "--prometheus-host", HOST,
                "--prometheus-port", str(free_port()), *extra]

    @classmethod
    def find(cls, kind: str = "smg") -> RouterSpec | None:
        """``$PDFLEET_ROUTER_BIN`` (kind from its name), else the scratch venvs under .cache/, else PATH."""
        env_bin = os.environ.get("PDFLEET_ROUTER_BIN")
        if env_bin:
            path = Path(env_bin)
            return cls("smg" if path.name == "smg" else "sglang-router", path)
        if kind == "smg":
            for cand in (REPO_ROOT / ".cache/router-smg/bin/smg", shutil.which("smg"),
                         Path(sys.executable).parent / "smg"):
                if cand and Path(cand).is_file() and _is_smg(Path(cand)):
                    return cls("smg", Path(cand))
        else:
            cand = REPO_ROOT / ".cache/router-sgl/bin/python"
            if cand.is_file():
                return cls("sglang-router", cand)
            if importlib.util.find_spec("sglang_router") is not None:
                return cls("sglang-router", Path(sys.executable))
        return None


def _is_smg(script: Path) -> bool:
    """True for the smg package's own script: sglang-router 0.3.2 installs an `smg` script too, which is
    sglang-router (`sgl-model-gateway 0.3.2`), not smg."""
    try:
        out = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return (out.stdout + out.stderr).strip().startswith("smg ")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it is still there after ``grace_s``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


@dataclass
class LocalPD:
    """A prefill and a decode simulated worker, and optionally a router, on 127.0.0.1."""

    worker_python: Sequence[str]
    log_dir: Path
    worker_env: Mapping[str, str] = field(default_factory=dict)
    router: RouterSpec | None = None
    model: str = "dsv4-sim"
    worker_args: Sequence[str] = ()
    router_args: Sequence[str] = ()
    startup_timeout_s: float = 120.0
    procs: list[Proc] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.prefill_port = free_port()
        self.decode_port = free_port()
        self.bootstrap_port = free_port()
        self.router_port = free_port()

    @property
    def prefill_url(self) -> str:
        return f"http://{HOST}:{self.prefill_port}"

    @property
    def decode_url(self) -> str:
        return f"http://{HOST}:{self.decode_port}"

    @property
    def router_url(self) -> str:
        return f"http://{HOST}:{self.router_port}"

    def worker_command(self, mode: str) -> list[str]:
        port = self.prefill_port if mode == "prefill" else self.decode_port
        return [*self.worker_python, "-m", "pdfleet_sim.worker", "--model-path", f"/models/{self.model}",
                "--served-model-name", self.model, "--trust-remote-code", "--disaggregation-mode", mode,
                "--disaggregation-transfer-backend", "nixl", "--disaggregation-bootstrap-port",
                str(self.bootstrap_port), "--tp", "4", "--base-gpu-id", "0" if mode == "prefill" else "4",
                "--host", HOST, "--port", str(port), "--enable-metrics", "--log-level", "info",
                *self.worker_args]

    def _spawn(self, name: str, cmd: list[str], env: Mapping[str, str]) -> Proc:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{name}.log"
        with log.open("wb") as fh:
            popen = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=dict(env),
                                     start_new_session=True, cwd=str(REPO_ROOT))
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def _wait_http(self, proc: Proc, url: str, ok: int = 200) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise LaunchError(f"{proc.name} exited with {proc.popen.returncode}; log {proc.log}:\n{proc.tail()}")
            try:
                if http_get(url, timeout=1.0)[0] == ok:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise LaunchError(f"{proc.name} not ready at {url} in {self.startup_timeout_s:.0f}s; log {proc.log}:\n"
                          f"{proc.tail()}")

    def start(self) -> LocalPD:
        try:
            env = {**os.environ, **self.worker_env}
            prefill = self._spawn("prefill", self.worker_command("prefill"), env)
            decode = self._spawn("decode", self.worker_command("decode"), env)
            self._wait_http(prefill, self.prefill_url + "/health")
            self._wait_http(decode, self.decode_url + "/health")
            if self.router is not None:
                cmd = self.router.command(self.prefill_url, self.bootstrap_port, self.decode_url,
                                          self.router_port, self.router_args)
                router = self._spawn("router", cmd, {**os.environ, "NO_COLOR": "1"})
                self._wait_http(router, self.router_url + "/readiness")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc.popen)

    def log_text(self, name: str) -> str:
        for proc in self.procs:
            if proc.name == name:
                return proc.log.read_text(errors="replace")
        return ""

    def __enter__(self) -> LocalPD:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
