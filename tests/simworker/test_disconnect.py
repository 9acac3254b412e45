"""A queued request whose client left is dropped without being computed, with SGLang's timing (issue 14).

Real SGLang (0.5.15.post1 and 0.5.23, see pdfleet_sim.worker.waitloop for file:line) notices a departed client in
the tokenizer manager's wait loop: every ``SGLANG_REQUEST_STATE_WAIT_TIMEOUT`` (4 s) without output it asks
whether the peer is gone, and if so aborts at once; the scheduler pops the request from its waiting queue
without computing it. A stream that had already started is cancelled by Starlette and aborted 2 s later
(``create_abort_task``; ``PDFLEET_SIM_ABORT_DELAY_S``, 0.5 s in these tests). The tests run the real 4 s tick,
on the monolithic stand-in (directly and behind the real router) and on a prefill/decode pair, and print
the measured times.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pdfleet_sim.testing.localpd import HOST, RouterSpec, free_port, http_get, http_json, stop_process
from pdfleet_sim.testing.simclient import chat_body

from .helpers import Worker, pd_request, stage_counts, wait_until

WAIT_S = 4.0  # SGLang's default SGLANG_REQUEST_STATE_WAIT_TIMEOUT; the workers run with it
ABORTS = "sglang:num_aborted_requests_total"
# 4800 characters: 1200 prompt tokens at 10 ms/token, a 12 s forward pass that keeps the next request queued.
BLOCKER = "x" * 4800


@pytest.fixture
def slow_env(fake_env: dict[str, str]) -> dict[str, str]:
    return {**fake_env, "PDFLEET_SIM_PREFILL_MS_PER_TOKEN": "10", "PDFLEET_SIM_DECODE_TOKENS_PER_S": "200"}


@dataclass
class Dropped:
    """One request sent on a raw socket, closed later: a client that was killed."""

    sock: socket.socket
    sent_at: float
    dropped_at: float = 0.0

    @classmethod
    def send(cls, url: str, path: str, body: dict[str, Any]) -> Dropped:
        raw = json.dumps(body).encode()
        host, port = url.removeprefix("http://").split(":")
        s = socket.create_connection((host, int(port)))
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
        return cls(s, time.monotonic())

    def drop(self) -> None:
        self.sock.close()
        self.dropped_at = time.monotonic()


def _state(url: str) -> dict[str, Any]:
    return json.loads(http_get(url + "/pdfleet/sim")[1])


def _hold(url: str, path: str, body: dict[str, Any]) -> threading.Thread:
    """The blocker: a request that occupies the forward pass (answered normally)."""
    t = threading.Thread(target=lambda: http_json(url + path, body, timeout=60), daemon=True)
    t.start()
    return t


def _wait_aborted(url: str, before: float, timeout: float = 20.0) -> float:
    """Poll until the worker counted one more abort; the monotonic time it was seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _state(url)["counters"][ABORTS] >= before + 1:
            return time.monotonic()
        time.sleep(0.02)
    raise AssertionError(f"{url}: no abort counted within {timeout}s")


def _wait_queued(url: str, count: int = 1) -> None:
    wait_until(lambda: stage_counts(url).get("waiting", 0) >= count, 10, f"{count} queued request(s) on {url}")


CASES = {
    # name: (path, body, started before the first token?)
    "chat stream": ("/v1/chat/completions", chat_body("dsv4-sim", "queued " * 50, 50, True), False),
    "chat whole": ("/v1/chat/completions", chat_body("dsv4-sim", "queued " * 50, 50, False), False),
    "generate stream": ("/generate", {"text": "queued " * 50, "sampling_params": {"max_new_tokens": 50},
                                      "stream": True}, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_mono_drops_a_queued_request_whose_client_left(
    case: str, sim_python: str, slow_env: dict[str, str], tmp_path: Path
) -> None:
    path, body, started = CASES[case]
    w = Worker(sim_python, slow_env, tmp_path / "mono.log", ["--log-level", "debug"])
    try:
        blocker = _hold(w.url, "/v1/chat/completions", chat_body("dsv4-sim", BLOCKER, 4, False))
        wait_until(lambda: stage_counts(w.url).get("running") == 1, 10, "the blocker's forward pass")
        before = _state(w.url)["counters"][ABORTS]
        req = Dropped.send(w.url, path, body)
        _wait_queued(w.url)
        time.sleep(1.0)
        req.drop()
        aborted_at = _wait_aborted(w.url, before)
        st = _state(w.url)
        assert st["stages"].get("running") == 1, "the abort came only after the blocker's forward pass ended"
        blocker.join(60)
        wait_until(lambda: not stage_counts(w.url), 10, "the worker to drain")
        st = _state(w.url)
        assert st["forward_passes"] == 1, "the dropped request was computed"
        assert st["counters"][ABORTS] == before + 1
        log = w.log.read_text()
        assert log.count("[http_server] Client disconnected") == 1, log[-3000:]
        assert "Abort queued request." in log
        after_submit, after_drop = aborted_at - req.sent_at, aborted_at - req.dropped_at
        if started:  # Starlette cancels the started stream; create_abort_task aborts after its delay
            assert "(stream started" in log
            assert after_drop >= 0.5 - 0.1
        else:  # the wait loop's first tick after the drop: WAIT_S after the request arrived
            assert "(type 1)" in log
            assert after_submit >= WAIT_S - 0.3, f"aborted {after_submit:.2f}s after arrival, before the first tick"
        print(f"\n[disconnect] mono {case}: dropped {req.dropped_at - req.sent_at:.2f}s after sending, aborted "
              f"{after_drop:.2f}s after the drop ({after_submit:.2f}s after arrival), never computed")
    finally:
        w.close()


def test_pd_pair_drops_queued_requests_whose_client_left(
    sim_python: str, slow_env: dict[str, str], tmp_path: Path
) -> None:
    """The router sends each request to both halves; a killed client closes both connections."""
    bport = free_port()
    common = ["--disaggregation-transfer-backend", "nixl", "--disaggregation-bootstrap-port", str(bport),
              "--log-level", "debug"]
    prefill = Worker(sim_python, slow_env, tmp_path / "prefill.log", ["--disaggregation-mode", "prefill", *common])
    decode = None
    try:
        decode = Worker(sim_python, slow_env, tmp_path / "decode.log", ["--disaggregation-mode", "decode", *common])
        threading.Thread(target=pd_request, daemon=True, args=(
            prefill.url, decode.url, bport, "/v1/chat/completions", chat_body("dsv4-sim", BLOCKER, 4, False), 60),
        ).start()
        wait_until(lambda: stage_counts(prefill.url).get("running") == 1, 10, "the blocker's prefill forward pass")
        p0, d0 = _state(prefill.url)["counters"][ABORTS], _state(decode.url)["counters"][ABORTS]
        body = {**chat_body("dsv4-sim", "queued " * 50, 50, True), "bootstrap_host": HOST, "bootstrap_port": bport,
                "bootstrap_room": 777}
        to_prefill = Dropped.send(prefill.url, "/v1/chat/completions", body)
        to_decode = Dropped.send(decode.url, "/v1/chat/completions", body)
        _wait_queued(prefill.url)
        # The blocker's decode half waits for its KV too.
        wait_until(lambda: stage_counts(decode.url).get("transfer") == 2, 10, "the decode to wait for the KV")
        time.sleep(1.0)
        to_prefill.drop()
        to_decode.drop()
        times = {}
        for name, url, before, req in (("prefill", prefill.url, p0, to_prefill), ("decode", decode.url, d0, to_decode)):
            seen = _wait_aborted(url, before)
            times[name] = (seen - req.sent_at, seen - req.dropped_at)
            assert times[name][0] >= WAIT_S - 0.3, f"{name} aborted before the wait loop's first tick: {times}"
        assert stage_counts(prefill.url).get("running") == 1, "the aborts came only after the blocker's prefill"
        wait_until(lambda: not stage_counts(prefill.url) and not stage_counts(decode.url), 30, "both to drain")
        assert _state(prefill.url)["forward_passes"] == 1, "the dropped request was prefilled"
        plog, dlog = prefill.log.read_text(), decode.log.read_text()
        assert "Abort queued request." in plog and "(type 1)" in plog
        assert "(type 1)" in dlog and "Decode transfer failed" in dlog and "Aborted by AbortReq." in dlog
        print("\n[disconnect] PD: " + ", ".join(f"{n} aborted {d:.2f}s after the drop ({s:.2f}s after arrival)"
                                                 for n, (s, d) in times.items()) + "; the prefill never computed it")
    finally:
        if decode is not None:
            decode.close()
        prefill.close()


@dataclass
class MonoStack:
    worker: Worker
    router_url: str


@pytest.fixture
def mono_stack(sim_python: str, slow_env: dict[str, str], router: RouterSpec, tmp_path: Path) -> Iterator[MonoStack]:
    w = Worker(sim_python, slow_env, tmp_path / "mono.log", ["--log-level", "debug"])
    port = free_port()
    with (tmp_path / "router.log").open("wb") as fh:
        proc = subprocess.Popen([*router.head(), "--worker-urls", w.url,
                                 "--host", HOST, "--port", str(port), "--prometheus-host", HOST,
                                 "--prometheus-port", str(free_port())], stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, "NO_COLOR": "1"})
    url = f"http://{HOST}:{port}"

    def ready() -> bool:
        try:
            return http_get(url + "/readiness", timeout=1)[0] == 200
        except OSError:
            return False

    try:
        try:
            wait_until(ready, 60, "the router")
        except AssertionError as e:
            raise AssertionError(f"{e}:\n{(tmp_path / 'router.log').read_text()[-2000:]}") from None
        yield MonoStack(w, url)
    finally:
        stop_process(proc)
        w.close()


@pytest.mark.slow
def test_mono_behind_the_router_drops_a_queued_stream(mono_stack: MonoStack) -> None:
    """The issue's case: the router holds its upstream connection once a stream's header has arrived, so the
    worker must not send one before the first chunk (SGLang's OpenAI handlers do not)."""
    w = mono_stack.worker
    blocker = _hold(mono_stack.router_url, "/v1/chat/completions", chat_body("dsv4-sim", BLOCKER, 4, False))
    wait_until(lambda: stage_counts(w.url).get("running") == 1, 10, "the blocker's forward pass")
    before = _state(w.url)["counters"][ABORTS]
    req = Dropped.send(mono_stack.router_url, "/v1/chat/completions",
                       chat_body("dsv4-sim", "queued " * 50, 50, True))
    _wait_queued(w.url)
    time.sleep(1.0)
    req.drop()
    aborted_at = _wait_aborted(w.url, before)
    assert stage_counts(w.url).get("running") == 1, "the abort came only after the blocker's forward pass ended"
    blocker.join(60)
    wait_until(lambda: not stage_counts(w.url), 10, "the worker to drain")
    assert _state(w.url)["forward_passes"] == 1, "the dropped request was computed"
    assert "(type 1)" in w.log.read_text()
    print("\n[disconnect] mono behind the router: aborted {aborted_at - req.dropped_at:.2f}s after the drop "
          f"({aborted_at - req.sent_at:.2f}s after sending), never computed")
