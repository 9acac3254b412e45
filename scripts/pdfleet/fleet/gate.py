"""The isolated gate: the verification protocol against one pair through a private, temporary router on
the control machine that knows only that pair. The production router never sees the pair until it passes.

The checks are pdfleet.verify's own (config gate, deep liveness, abort cascade, recovery, journal scan),
with shorter cascade defaults (``gate_settings``); the benchmark is left to the fleet-wide comparison.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from pdfleet.errors import PdfleetError
from pdfleet.fleet.http import HTTPError, call
from pdfleet.fleet.pairs import Pair
from pdfleet.verify.logs import LogSource
from pdfleet.verify.protocol import run_protocol
from pdfleet.verify.report import Report
from pdfleet.verify.settings import Settings
from pdfleet.verify.targets import Target, Worker
from pdfleet.versions import PINS, ROUTER_MODULES

LOOPBACK = "127.0.0.1"


class GateError(PdfleetError):
    """The temporary router could not be started; the message carries its log."""


def gate_settings(**overrides: Any) -> Settings:
    """The protocol's settings for a gate: one short cascade (30 sessions, 4 s window: it runs once per host,
    under a rollout's clock; the protocol's long agent-sized prompts are kept so the kill still finds KV
    transfers pending and ABORT reaches the prefill), no benchmark. Every value can be overridden
    (``pdfleet_rollout_gate_settings`` in rollout.yml)."""
    base = Settings(cycles=1, concurrency=30, window_s=4.0, pause_s=1.0, settle_s=2.0, liveness_deadline_s=30.0,
                    recovery_deadline_s=30.0, probe_concurrency=8, probe_deadline_s=30.0, idle_deadline_s=30.0,
                    skip=("bench",))
    fields = {k: (tuple(v) if k == "skip" else Path(v) if k == "baseline_file" else v) for k, v in overrides.items()}
    return replace(base, **fields)


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports: every socket stays bound until all are picked (one at a time, the
    kernel may hand the same port out twice, and the router then fails with "Address already in use")."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)]
        for s in socks:
            s.bind((LOOPBACK, 0))
        return [int(s.getsockname()[1]) for s in socks]


# The router the gates start: the pinned package's (the control machine's venv has it; the watchdog passes the
# gateway venv's Python and the plan's package).
DEFAULT_ROUTER_MODULE = ROUTER_MODULES[str(PINS["sglang_router_package"])]


def router_command(pair: Pair, port: int, metrics_port: int, python: str = sys.executable,
                   module: str = DEFAULT_ROUTER_MODULE) -> list[str]:
    """The router (``python -m module``) on loopback, knowing only ``pair`` (our ports, its default policies)."""
    argv = [python, "-m", module]
    if pair.is_pd:
        argv.append("--pd-disaggregation")
        for m in pair.role("prefill"):
            argv += ["--prefill", m.url, str(m.bootstrap_port)]
        for m in pair.role("decode"):
            argv += ["--decode", m.url]
    else:
        argv += ["--worker-urls", *pair.urls]
    return [*argv, "--host", LOOPBACK, "--port", str(port), "--prometheus-host", LOOPBACK,
            "--prometheus-port", str(metrics_port)]


def _log_file() -> Path:
    """A private (0600) file for the temporary router's output, removed when it stops unless it failed to start."""
    fd, name = tempfile.mkstemp(prefix="pdfleet-gate-router-", suffix=".log")
    os.close(fd)
    return Path(name)


@dataclass
class TempRouter:
    """A private router process for one pair; always stopped on exit (process group, TERM then KILL)."""

    pair: Pair
    python: str = sys.executable
    startup_timeout_s: float = 60.0
    module: str = DEFAULT_ROUTER_MODULE
    log: Path = field(default_factory=lambda: _log_file())
    keep_log: bool = False  # set when the router failed to start: its error names the log, left for the operator
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> TempRouter:
        package = self.module.partition(".")[0]
        if self.python == sys.executable and importlib.util.find_spec(package) is None:
            raise GateError(f"{package} is not installed in this Python: the gate's temporary router needs it "
                            f"(a dependency of pdfleet: reinstall pdfleet in {sys.prefix}, or give the gateway venv's "
                            "Python)")
        self.port, metrics_port = _free_ports(2)
        cmd = router_command(self.pair, self.port, metrics_port, self.python, self.module)
        with self.log.open("wb") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, "NO_COLOR": "1"})
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.keep_log = True
                raise GateError(f"the gate router for {self.pair.host} exited {self.proc.returncode}: {self._tail()} "
                                f"(its whole log: {self.log})")
            with contextlib.suppress(HTTPError):
                if call("GET", self.url + "/readiness", timeout_s=2.0)[0] == 200:
                    return self
            time.sleep(0.2)
        self.keep_log = True
        self.stop()
        raise GateError(f"the gate router for {self.pair.host} was not ready in {self.startup_timeout_s:g} s "
                        f"(its workers {', '.join(self.pair.urls)} may be down): {self._tail()} (its whole log: "
                        f"{self.log})")

    def _tail(self) -> str:
        try:
            return " / ".join(self.log.read_text(errors="replace").splitlines()[-5:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        try:
            self._stop_process()
        finally:
            if not self.keep_log:
                self.log.unlink(missing_ok=True)

    def _stop_process(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)

    def __enter__(self) -> TempRouter:
        try:
            return self.start()
        except BaseException:
            self.stop()  # a start that failed: the process gone, the log kept only when the error names it
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def temp_router(pair: Pair, python: str = sys.executable, startup_timeout_s: float = 60.0,
                module: str = DEFAULT_ROUTER_MODULE) -> Iterator[TempRouter]:
    with TempRouter(pair, python, startup_timeout_s, module=module) as r:
        yield r


def pair_target(pair: Pair, router_url: str, model: str | None, sglang_version: str | None,
                tp: dict[str, int] | None = None, profile: str = "explicit") -> Target:
    """The protocol's target for one pair behind ``router_url`` (what to expect: model, version, TP)."""
    workers = [Worker(m.name, m.role, m.url, m.host, (tp or {}).get(m.name)) for m in pair.members]
    return Target(router_url=router_url, workers=workers, model=model, sglang_version=sglang_version,
                  profile=profile)


@dataclass
class GateResult:
    host: str
    ok: bool
    verdict: str
    failures: list[dict[str, Any]]
    seconds: float
    report: dict[str, Any]

    def describe(self) -> str:
        if self.ok:
            return f"{self.host}: gate passed in {self.seconds:.1f} s"
        parts = [f"[{f['check']} {f['status']}] {f['summary']}; measured {f.get('measured')}" for f in self.failures]
        return f"{self.host}: gate {self.verdict.upper()}: " + " | ".join(parts or ["(no failing check recorded)"])

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "ok": self.ok, "verdict": self.verdict, "failures": self.failures,
                "seconds": round(self.seconds, 3), "report": self.report}


def isolated_gate(pair: Pair, settings: Settings, logs: LogSource | None, model: str | None = None,
                  sglang_version: str | None = None, tp: dict[str, int] | None = None,
                  router_python: str = sys.executable, out: TextIO = sys.stderr,
                  extra_router_args: Sequence[str] = (), router_module: str = DEFAULT_ROUTER_MODULE) -> GateResult:
    """Run the protocol against ``pair`` through a temporary router; ``ok`` only on a ``pass`` verdict."""
    del extra_router_args  # reserved: the production router's flags do not change what the gate proves
    t0 = time.monotonic()
    try:
        with temp_router(pair, router_python, module=router_module) as router:
            target = pair_target(pair, router.url, model, sglang_version, tp)
            report: Report = asyncio.run(run_protocol(target, settings, logs, out=out))
    except GateError as e:
        failure = {"check": "gate-router", "status": "error", "summary": str(e), "measured": None}
        return GateResult(pair.host, False, "inconclusive", [failure], time.monotonic() - t0, {})
    data = report.to_dict()
    return GateResult(pair.host, report.verdict == "pass", report.verdict, report.failures(),
                      time.monotonic() - t0, data)
