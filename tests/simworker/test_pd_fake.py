"""PD handshake between two simulated workers on the light KV stand-in, without a router.

The fake reader thread can act like the affected SGLang versions (dies on ABORT) or the fixed ones,
so the wedge mechanics (thread death → rooms stay Bootstrapping → requests hang while /health is 200)
are covered without the heavy runtime; test_cascade.py repeats it on SGLang's real code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pdfleet.simworker.client import chat_body
from pdfleet.simworker.launch import HOST, free_port, http_get, http_json

from .helpers import Worker, open_and_drop, pd_request, stage_counts, wait_until


@dataclass
class Pair:
    prefill: Worker
    decode: Worker
    bootstrap_port: int

    def request(self, max_tokens: int = 8, timeout: float = 20.0) -> tuple[int, object]:
        return pd_request(self.prefill.url, self.decode.url, self.bootstrap_port, "/v1/chat/completions",
                          chat_body("dsv4-sim", "In one sentence, what is PCIe?", max_tokens, False), timeout)

    def close(self) -> None:
        self.decode.close()
        self.prefill.close()


def _pair(python: str, env: dict[str, str], tmp: Path) -> Pair:
    bport = free_port()
    common = ["--disaggregation-transfer-backend", "nixl", "--disaggregation-bootstrap-port", str(bport)]
    prefill = Worker(python, env, tmp / "prefill.log", ["--disaggregation-mode", "prefill", *common])
    try:
        decode = Worker(python, env, tmp / "decode.log", ["--disaggregation-mode", "decode", *common])
    except BaseException:
        prefill.close()
        raise
    return Pair(prefill, decode, bport)


@pytest.fixture(params=["pristine", "patched"])
def pair(request: pytest.FixtureRequest, sim_python: str, fake_env: dict[str, str], tmp_path: Path) -> Iterator[Pair]:
    env = {**fake_env, "PDFLEET_SIM_DECODE_TOKENS_PER_S": "400",
           "PDFLEET_SIM_FAKE_ABORT_KILLS_THREAD": "1" if request.param == "pristine" else "0"}
    p = _pair(sim_python, env, tmp_path)
    p.kind = request.param  # type: ignore[attr-defined]
    yield p
    p.close()


def test_bootstrap_routes(sim_python: str, fake_env: dict[str, str], tmp_path: Path) -> None:
    p = _pair(sim_python, fake_env, tmp_path)
    try:
        base = f"http://{HOST}:{p.bootstrap_port}"
        status, layout = http_json(base + "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1"
                                   "&target_pp_rank=-1")
        assert status == 200 and layout["attn_tp_size"] == 1 and layout["dp_size"] == 1
        status, rank = http_json(base + "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0")
        assert status == 200 and rank["rank_ip"] == HOST and rank["rank_port"] > 0
        assert http_get(base + "/route?prefill_dp_rank=0")[0] == 400
        assert http_get(base + "/route?prefill_dp_rank=5&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0")[0] == 404
        assert http_get(base + "/health")[0] == 200
    finally:
        p.close()


def test_pd_request_completes(pair: Pair) -> None:
    status, res = pair.request(max_tokens=10)
    assert status == 200, res
    assert res["usage"]["completion_tokens"] == 10 and res["id"].startswith("chatcmpl-")  # type: ignore[index]
    wait_until(lambda: not stage_counts(pair.prefill.url) and not stage_counts(pair.decode.url), 5, "queues to drain")


def test_abort_with_pending_transfer(pair: Pair) -> None:
    # A decode request whose prefill half never arrives: its transfer stays pending, then the client
    # goes away, so the decode pushes ABORT to the prefill rank socket.
    body = {**chat_body("dsv4-sim", "never prefilled", 8, True), "bootstrap_host": HOST,
            "bootstrap_port": pair.bootstrap_port, "bootstrap_room": 4242}
    open_and_drop(pair.decode.url, "/v1/chat/completions", body, 0.5)
    wait_until(lambda: pair.decode.state()["counters"]["sglang:num_transfer_failed_reqs_total"] == 1, 10,
               "the decode-side abort")
    assert "Aborted by AbortReq." in pair.decode.log.read_text()
    if pair.kind == "pristine":  # type: ignore[attr-defined]
        wait_until(lambda: not pair.prefill.state()["kv_threads"]["bootstrap_thread"], 5, "the reader to die")
        assert "First message should be" in pair.prefill.log.read_text()
        assert http_get(pair.prefill.url + "/health")[0] == 200  # the wedge is invisible to /health
        status, _ = pair.request(timeout=4.0)
        assert status == 0, "a new request must hang once the reader thread is dead"
        assert stage_counts(pair.prefill.url).get("bootstrap") == 1
        metrics = http_get(pair.prefill.url + "/metrics")[1].decode()
        assert 'sglang:num_prefill_bootstrap_queue_reqs{model_name="dsv4-sim",engine_type="prefill"' in metrics
    else:
        status, res = pair.request()
        assert status == 200, res
        assert pair.prefill.state()["kv_threads"]["bootstrap_thread"] is True
