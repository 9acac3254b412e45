"""API shapes of one simulated worker (no PD) on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet_sim.testing.localpd import http_get, http_json
from pdfleet_sim.testing.simclient import chat_body, stream_chat

from .helpers import Worker, open_and_drop, stage_counts, wait_until


@pytest.fixture(scope="module")
def worker(sim_python: str, fake_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    log = tmp_path_factory.mktemp("api") / "worker.log"
    w = Worker(sim_python, {**fake_env, "PDFLEET_SIM_DECODE_TOKENS_PER_S": "400"}, log,
               ["--tp", "4", "--page-size", "256", "--unknown-flag-for-test"])
    yield w
    w.close()


def test_info_endpoints(worker: Worker) -> None:
    for path in ("/server_info", "/get_server_info"):
        status, info = http_json(worker.url + path)
        assert status == 200
        assert info["tp_size"] == 4 and info["dp_size"] == 1 and info["page_size"] == 256
        assert info["disaggregation_mode"] == "null"
        assert info["served_model_name"] == "dsv4-sim" and info["model_path"] == "/models/dsv4-sim"
        assert info["version"] and isinstance(info["internal_states"], list)
    for path in ("/model_info", "/get_model_info"):
        status, info = http_json(worker.url + path)
        assert status == 200 and info["model_path"] == "/models/dsv4-sim" and info["is_generation"] is True
    status, load = http_json(worker.url + "/get_load")
    assert status == 200 and load[0]["dp_rank"] == 0 and "num_reqs" in load[0]
    status, models = http_json(worker.url + "/v1/models")
    assert status == 200 and models["data"][0]["id"] == "dsv4-sim" and models["object"] == "list"
    assert http_get(worker.url + "/health")[0] == 200
    assert http_get(worker.url + "/health_generate")[0] == 200
    assert "--unknown-flag-for-test" in worker.log.read_text()


def test_chat_completion_whole(worker: Worker) -> None:
    status, res = http_json(worker.url + "/v1/chat/completions",
                            chat_body("dsv4-sim", "In one sentence, what is PCIe?", 12, False))
    assert status == 200
    assert res["id"].startswith("chatcmpl-") and res["model"] == "dsv4-sim" and res["object"] == "chat.completion"
    assert res["choices"][0]["message"]["role"] == "assistant" and res["choices"][0]["message"]["content"]
    assert res["choices"][0]["finish_reason"] == "length"
    assert res["usage"]["completion_tokens"] == 12
    assert res["usage"]["total_tokens"] == res["usage"]["prompt_tokens"] + 12


def test_chat_completion_stream(worker: Worker) -> None:
    r = stream_chat(worker.url + "/v1/chat/completions", chat_body("dsv4-sim", "hello", 6, True))
    assert r.error is None and r.status == 200
    assert r.completion_id and r.completion_id.startswith("chatcmpl-") and r.model == "dsv4-sim"
    assert r.finish_reason == "length" and r.usage and r.usage["completion_tokens"] == 6
    assert r.first_token_s is not None and r.text


def test_generate_native(worker: Worker) -> None:
    status, res = http_json(worker.url + "/generate",
                            {"input_ids": list(range(100)), "sampling_params": {"max_new_tokens": 4}})
    assert status == 200
    assert len(res["output_ids"]) == 4 and res["meta_info"]["prompt_tokens"] == 100
    assert res["meta_info"]["completion_tokens"] == 4 and res["meta_info"]["finish_reason"]["type"] == "length"
    status, err = http_json(worker.url + "/generate", {"sampling_params": {}})
    assert status == 400 and "input_ids" in err["message"]


def test_generate_stream_is_cumulative(worker: Worker) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", worker.port, timeout=10)
    conn.request("POST", "/generate", json.dumps({"text": "hi", "stream": True, "sampling_params":
                                                  {"max_new_tokens": 3}}), {"Content-Type": "application/json"})
    lines = [ln.strip() for ln in conn.getresponse() if ln.startswith(b"data:")]
    assert lines[-1] == b"data: [DONE]"
    chunks = [json.loads(ln[5:]) for ln in lines[:-1]]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 3]
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert chunks[2]["text"].startswith(chunks[1]["text"])


def test_metrics_endpoint(worker: Worker) -> None:
    status, body = http_get(worker.url + "/metrics")
    text = body.decode()
    assert status == 200
    assert 'sglang:num_running_reqs{model_name="dsv4-sim",engine_type="unified"' in text
    assert "sglang:generation_tokens_total{" in text and "sglang:num_decode_transfer_queue_reqs{" in text


def test_pd_request_without_bootstrap_is_rejected(sim_python: str, fake_env: dict[str, str], tmp_path: Path) -> None:
    w = Worker(sim_python, fake_env, tmp_path / "decode.log", ["--disaggregation-mode", "decode"])
    try:
        status, err = http_json(w.url + "/generate", {"text": "hi"})
        assert status == 400 and "bootstrap" in err["message"]
    finally:
        w.close()


def test_client_disconnect_is_an_abort(worker: Worker) -> None:
    before = worker.state()["counters"]["sglang:num_aborted_requests_total"]
    open_and_drop(worker.url, "/v1/chat/completions", chat_body("dsv4-sim", "long answer", 100_000, True),
                  lambda: stage_counts(worker.url), "the worker holding the request")
    wait_until(lambda: worker.state()["counters"]["sglang:num_aborted_requests_total"] == before + 1, 10,
               "the abort to be counted")
    wait_until(lambda: not stage_counts(worker.url), 5, "the request to leave the scheduler")
    assert "[http_server] Client disconnected" in worker.log.read_text()
