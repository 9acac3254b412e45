"""The conformance checks against broken hosts: each must fail naming the host (issue 11 item 8).

The real check functions of the packaged suite (pdfleet.conformance_suite) run against a scripted host (what
each command prints on a healthy or a broken machine) for the pd-4p4d example's gpu01: first healthy (the check
passes, so it can fail), then with one thing broken. No SSH, no network beyond a loopback router stand-in.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest
from pdfleet.conformance import Expectations, load
from pdfleet.conformance_suite import test_conformance as checks
from pdfleet.paths import REPO_ROOT
from pdfleet.versions import PINS

HOST = "gpu01"
UCX_OK = "# Transport: tcp\n# Device: lo\n# Transport: cuda_ipc\n# Transport: cuda_copy\n"
NVCC_OK = "Cuda compilation tools, release 13.0, V13.0.88\n"


@dataclass
class Out:
    rc: int = 0
    stdout: str = ""
    stderr: str = ""


@dataclass
class FakeHost:
    """Answers testinfra's calls from a table: command substring -> output; services, sockets."""

    commands: dict[str, Out] = field(default_factory=lambda: {
        "-F license nvidia": Out(stdout="Dual MIT/GPL\n"),
        "nvcc --version": Out(stdout=NVCC_OK),
        "ucx_info": Out(stdout=UCX_OK),
        "import importlib.metadata as m, nixl": Out(stdout=f"{PINS['nixl_version']}\n"),
    })
    services: dict[str, tuple[bool, bool]] = field(default_factory=dict)  # name -> (enabled, running)
    closed_ports: set[int] = field(default_factory=set)

    def run(self, cmd: str) -> Out:
        for key, out in self.commands.items():
            if key in cmd:
                return out
        return Out(rc=127, stderr=f"unscripted: {cmd}")

    def service(self, name: str) -> SimpleNamespace:
        enabled, running = self.services.get(name, (True, True))
        return SimpleNamespace(is_enabled=enabled, is_running=running)

    def socket(self, url: str) -> SimpleNamespace:
        return SimpleNamespace(is_listening=int(url.rsplit(":", 1)[1]) not in self.closed_ports)


@pytest.fixture(scope="module")
def expectations() -> Expectations:
    return load(REPO_ROOT / "inventory" / "examples" / "pd-4p4d")


@pytest.fixture(scope="module")
def target(expectations: Expectations) -> Any:
    return next(t for t in expectations.targets if t.name == HOST)


def _fails_naming_host(check: Any, *args: Any) -> str:
    with pytest.raises(AssertionError) as e:
        check(*args)
    message = str(e.value)
    assert message.startswith(f"{HOST}:"), message
    return message


def test_persistenced_stopped(target: Any) -> None:
    checks.test_persistenced_runs(target, FakeHost())
    msg = _fails_naming_host(checks.test_persistenced_runs, target,
                             FakeHost(services={"nvidia-persistenced": (True, False)}))
    assert "not running" in msg


def test_cuda_version_wrong(target: Any, expectations: Expectations) -> None:
    checks.test_cuda_toolkit_is_the_pin(target, FakeHost(), expectations)
    broken = FakeHost()
    broken.commands["nvcc --version"] = Out(stdout="Cuda compilation tools, release 12.6, V12.6.20\n")
    msg = _fails_naming_host(checks.test_cuda_toolkit_is_the_pin, target, broken, expectations)
    assert "release 12.6" in msg and "expected 13.0" in msg


@pytest.mark.parametrize("missing", ["cuda_ipc", "tcp"])
def test_nixl_ucx_transport_missing(target: Any, expectations: Expectations, missing: str) -> None:
    checks.test_nixl_and_ucx(target, FakeHost(), expectations)
    broken = FakeHost()
    broken.commands["ucx_info"] = Out(stdout=UCX_OK.replace(f"# Transport: {missing}\n", ""))
    msg = _fails_naming_host(checks.test_nixl_and_ucx, target, broken, expectations)
    assert f"lacks {missing}" in msg


def test_nixl_not_importable(target: Any, expectations: Expectations) -> None:
    broken = FakeHost()
    broken.commands["import importlib.metadata as m, nixl"] = Out(rc=1, stderr="ModuleNotFoundError: nixl")
    failure = _fails_naming_host(checks.test_nixl_and_ucx, target, broken, expectations)
    assert f"expected nixl {PINS['nixl_version']}" in failure


def test_proprietary_kernel_module(target: Any) -> None:
    checks.test_open_kernel_module(target, FakeHost())
    broken = FakeHost()
    broken.commands["-F license nvidia"] = Out(stdout="NVIDIA\n")
    assert "'NVIDIA'" in _fails_naming_host(checks.test_open_kernel_module, target, broken)


def test_port_not_listening(target: Any) -> None:
    checks.test_ports_listening(target, FakeHost())
    port = next(u.ports["port"] for u in target.units if u.role == "decode")
    msg = _fails_naming_host(checks.test_ports_listening, target, FakeHost(closed_ports={port}))
    assert f":{port}" in msg and "nothing listens" in msg


@pytest.fixture
def router_stub() -> Iterator[dict[str, int]]:
    """A loopback router whose /readiness answers the status the test sets."""
    state = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(state["status"])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["port"] = server.server_address[1]
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_router_not_ready(target: Any, expectations: Expectations, router_stub: dict[str, int]) -> None:
    local = replace(expectations, plan=SimpleNamespace(router_url=f"http://127.0.0.1:{router_stub['port']}"))
    checks.test_router_ready(target, local)
    router_stub["status"] = 503
    assert "answers 503" in _fails_naming_host(checks.test_router_ready, target, local)


def _peer_matrix(status: str) -> str:
    """`nvidia-smi topo -p2p` of eight GPUs, `status` between GPUs 0-3 and 4-7 (the driver's layout)."""
    cell = lambda i, j: "X" if i == j else ("OK" if i // 4 == j // 4 else status)  # noqa: E731
    return (" \t" + "".join(f"GPU{j}\t" for j in range(8)) + "\n"
            + "".join(f" GPU{i}\t" + "".join(cell(i, j) + "\t" for j in range(8)) + "\n" for i in range(8))
            + "\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  NS   = Not supported\n")


def test_gpu_peer_access_off(target: Any) -> None:
    healthy = FakeHost()
    healthy.commands["nvidia-smi topo -p2p"] = Out(stdout=_peer_matrix("OK"))
    checks.test_gpu_peer_access_between_prefill_and_decode(target, healthy)
    broken = FakeHost()
    broken.commands["nvidia-smi topo -p2p"] = Out(stdout=_peer_matrix("NS"))
    msg = _fails_naming_host(checks.test_gpu_peer_access_between_prefill_and_decode, target, broken)
    assert "peer read (`nvidia-smi topo -p2p r`) is not OK for 32 of the 32" in msg
    assert "peer write" in msg and "NS (Not supported): GPU0->GPU4" in msg and "ACS" in msg
