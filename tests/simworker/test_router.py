"""The real router (PD mode) in front of a simulated prefill/decode pair, on the light KV stand-in."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet_sim.testing.localpd import LocalPD, RouterSpec, http_get, http_json
from pdfleet_sim.testing.simclient import chat_body, stream_chat

from .helpers import open_and_drop, stage_counts, wait_until

pytestmark = pytest.mark.slow


def _state(url: str) -> dict:
    return json.loads(http_get(url + "/pdfleet/sim")[1])


@pytest.fixture
def slow_prefill_env(fake_env: dict[str, str]) -> dict[str, str]:
    # 1000-token prompt at 10 ms/token: a 10 s prefill, long enough to drop a client before its first token.
    return {**fake_env, "PDFLEET_SIM_PREFILL_MS_PER_TOKEN": "10", "PDFLEET_SIM_DECODE_TOKENS_PER_S": "200"}


@pytest.fixture(params=["sglang-router", "smg"])
def stack(
    request: pytest.FixtureRequest, sim_python: str, fake_env: dict[str, str], tmp_path: Path
) -> Iterator[LocalPD]:
    spec: RouterSpec = request.getfixturevalue("sgl_router" if request.param == "sglang-router" else "smg_router")
    with LocalPD([sim_python], tmp_path, {**fake_env, "PDFLEET_SIM_DECODE_TOKENS_PER_S": "200"}, spec) as pd:
        yield pd


def test_registration_readiness_and_chat(stack: LocalPD) -> None:
    assert http_get(stack.router_url + "/readiness")[0] == 200
    assert http_get(stack.router_url + "/liveness")[0] == 200
    for url in (stack.prefill_url, stack.decode_url):
        hits = _state(url)["route_hits"]
        assert hits.get("GET /server_info", 0) + hits.get("GET /get_server_info", 0) >= 1, hits
        assert hits.get("GET /model_info", 0) + hits.get("GET /get_model_info", 0) >= 1, hits
        assert hits.get("GET /health", 0) >= 1, hits

    status, res = http_json(stack.router_url + "/v1/chat/completions",
                            chat_body(stack.model, "In one sentence, what is PCIe?", 40, False))
    assert status == 200, res
    assert res["id"].startswith("chatcmpl-") and res["model"] == stack.model
    assert res["usage"]["completion_tokens"] == 40

    r = stream_chat(stack.router_url + "/v1/chat/completions", chat_body(stack.model, "hi", 12, True))
    assert r.error is None and r.finish_reason == "length" and r.usage and r.usage["completion_tokens"] == 12
    assert _state(stack.prefill_url)["route_hits"]["POST /v1/chat/completions"] == 2
    wait_until(lambda: not stage_counts(stack.prefill_url) and not stage_counts(stack.decode_url), 5, "drain")


def test_router_propagates_disconnect_before_first_token(
    sim_python: str, slow_prefill_env: dict[str, str], sgl_router: RouterSpec, tmp_path: Path
) -> None:
    """sglang-router 0.3.2 (still accepted as router_package) passes a disconnect on too."""
    with LocalPD([sim_python], tmp_path, slow_prefill_env, sgl_router) as pd:
        open_and_drop(pd.router_url, "/v1/chat/completions", chat_body(pd.model, "x" * 4000, 50, True),
                      lambda: stage_counts(pd.prefill_url) and stage_counts(pd.decode_url),
                      "both workers holding the request")
        wait_until(lambda: _state(pd.decode_url)["counters"]["sglang:num_aborted_requests_total"] == 1, 8,
                   "the decode worker to see the client's disconnect")
        wait_until(lambda: _state(pd.prefill_url)["counters"]["sglang:num_aborted_requests_total"] == 1, 8,
                   "the prefill worker to see the client's disconnect")
        assert "Aborted by AbortReq." in pd.log_text("decode")


def test_smg_propagates_disconnect_before_first_token(
    sim_python: str, slow_prefill_env: dict[str, str], smg_router: RouterSpec, tmp_path: Path
) -> None:
    """smg 1.13.0 passes on a PD stream's disconnect before its first token too.

    This test used to show the opposite: smg relays a stream through a bounded channel and notices that the
    client left only when it forwards the next chunk, and the stand-in sent its stream header at once, so smg
    held both upstream connections until the first token. SGLang's OpenAI handlers send nothing before the
    first chunk (serving_chat.py kick-starts the generator; see pdfleet_sim.worker.waitloop), so the router is
    still waiting for the workers' answers when its client leaves, and smg drops them like sglang-router.
    """
    with LocalPD([sim_python], tmp_path, slow_prefill_env, smg_router) as pd:
        open_and_drop(pd.router_url, "/v1/chat/completions", chat_body(pd.model, "x" * 4000, 20, True),
                      lambda: stage_counts(pd.prefill_url) and stage_counts(pd.decode_url),
                      "both workers holding the request")
        wait_until(lambda: _state(pd.decode_url)["counters"]["sglang:num_aborted_requests_total"] == 1, 10,
                   "the decode worker to see the client's disconnect")
        wait_until(lambda: _state(pd.prefill_url)["counters"]["sglang:num_aborted_requests_total"] == 1, 10,
                   "the prefill worker to see the client's disconnect")
        assert "Aborted by AbortReq." in pd.log_text("decode")
