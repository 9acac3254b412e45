"""PD handshake between two simulated workers on the light KV stand-in, without a router.

The fake reader thread can act like the affected SGLang versions (dies on ABORT) or the fixed ones,
so the wedge mechanics (thread death → rooms stay Bootstrapping → requests hang while /health is 200)
are covered without the heavy runtime; test_cascade.py repeats it on SGLang's real code. The lines the fake
thread prints are the stand-in's own: nothing here proves a log signature (the logs verdicts are tested on
SGLang's real code: tests/verify, tests/watchdog).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pdfleet.verify.metrics import parse_prometheus
from pdfleet.watchdog.progress import PROGRESS_COUNTERS, TRANSFERS_DONE, progress_counters
from pdfleet_sim.testing.localpd import HOST, free_port, http_get, http_json
from pdfleet_sim.testing.simclient import chat_body

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


def _transfers_done(url: str) -> float | None:
    """The prefill's completed KV transfers, as the watchdog reads them (SGLang's kv_transfer_latency_ms count);
    None while it exports no sample (before its first transfer, as SGLang's labelled histogram)."""
    return parse_prometheus(http_get(url + "/metrics")[1].decode()).get(TRANSFERS_DONE)


def test_pd_request_completes(pair: Pair) -> None:
    assert _transfers_done(pair.prefill.url) is None  # fresh: the histogram has no sample yet
    assert progress_counters("prefill", parse_prometheus(http_get(pair.prefill.url + "/metrics")[1].decode())) \
        == PROGRESS_COUNTERS["prefill"]  # so the watchdog reads the request counters until the first transfer
    status, res = pair.request(max_tokens=10)
    assert status == 200, res
    assert _transfers_done(pair.prefill.url) == 1
    status, res = pair.request(max_tokens=10)
    assert status == 200 and _transfers_done(pair.prefill.url) == 2, res
    assert res["usage"]["completion_tokens"] == 10 and res["id"].startswith("chatcmpl-")  # type: ignore[index]
    wait_until(lambda: not stage_counts(pair.prefill.url) and not stage_counts(pair.decode.url), 5, "queues to drain")


def test_abort_with_pending_transfer(pair: Pair) -> None:
    # A decode request whose prefill half never arrives: its transfer stays pending, then the client
    # goes away, so the decode pushes ABORT to the prefill rank socket.
    body = {**chat_body("dsv4-sim", "never prefilled", 8, True), "bootstrap_host": HOST,
            "bootstrap_port": pair.bootstrap_port, "bootstrap_room": 4242}
    open_and_drop(pair.decode.url, "/v1/chat/completions", body, lambda: stage_counts(pair.decode.url),
                  "the decode holding the request")
    wait_until(lambda: pair.decode.state()["counters"]["sglang:num_transfer_failed_reqs_total"] == 1, 10,
               "the decode-side abort")
    assert "Aborted by AbortReq." in pair.decode.log.read_text()
    if pair.kind == "pristine":  # type: ignore[attr-defined]
        wait_until(lambda: not pair.prefill.state()["kv_threads"]["bootstrap_thread"], 5, "the reader to die")
        assert "First message should be" in pair.prefill.log.read_text()
        assert http_get(pair.prefill.url + "/health")[0] == 200  # the wedge is invisible to /health
        done = _transfers_done(pair.prefill.url)
        status, _ = pair.request(timeout=4.0)
        assert status == 0, "a new request must hang once the reader thread is dead"
        assert _transfers_done(pair.prefill.url) == done  # no KV transfer completes: the watchdog's progress
        assert stage_counts(pair.prefill.url).get("bootstrap") == 1
        metrics = http_get(pair.prefill.url + "/metrics")[1].decode()
        assert 'sglang:num_prefill_bootstrap_queue_reqs{model_name="dsv4-sim",engine_type="prefill"' in metrics
    else:
        status, res = pair.request()
        assert status == 200, res
        assert pair.prefill.state()["kv_threads"]["bootstrap_thread"] is True


def _tp_pair(python: str, env: dict[str, str], tmp: Path, prefill_tp: int, decode_tp: int) -> Pair:
    bport = free_port()
    common = ["--disaggregation-transfer-backend", "nixl", "--disaggregation-bootstrap-port", str(bport)]
    prefill = Worker(python, env, tmp / "prefill.log",
                     ["--disaggregation-mode", "prefill", "--tp", str(prefill_tp), *common])
    try:
        decode = Worker(python, env, tmp / "decode.log",
                        ["--disaggregation-mode", "decode", "--tp", str(decode_tp), *common])
    except BaseException:
        prefill.close()
        raise
    return Pair(prefill, decode, bport)


def _bootstrap_threads(worker: Worker) -> dict[str, bool]:
    return {k: v for k, v in worker.state()["kv_threads"].items() if k.startswith("bootstrap_thread")}


def test_every_tp_rank_registers_its_own_socket(sim_python: str, fake_env: dict[str, str], tmp_path: Path) -> None:
    p = _tp_pair(sim_python, fake_env, tmp_path, 4, 4)
    try:
        base = f"http://{HOST}:{p.bootstrap_port}/route?prefill_dp_rank={{}}&prefill_cp_rank={{}}" \
               "&target_tp_rank={}&target_pp_rank={}"
        status, layout = http_json(base.format(-1, -1, -1, -1))
        assert status == 200 and layout["attn_tp_size"] == 4
        ports = {http_json(base.format(0, 0, r, 0))[1]["rank_port"] for r in range(4)}
        assert len(ports) == 4  # four sockets, one per rank
        assert http_get(base.format(0, 0, 4, 0))[0] == 404
        assert _bootstrap_threads(p.prefill) == {f"bootstrap_thread@tp{r}": True for r in range(4)}
    finally:
        p.close()


@pytest.mark.parametrize("decode_tp", [2, 4, 8])
def test_tp_pair_serves_with_any_rank_mapping(decode_tp: int, sim_python: str, fake_env: dict[str, str],
                                              tmp_path: Path) -> None:
    """Decode TP below, equal to and above the prefill's 4: every prefill rank gets the transfer info it
    waits for (required_dst_info_num decode ranks each), or the room would stay Bootstrapping."""
    p = _tp_pair(sim_python, {**fake_env, "PDFLEET_SIM_DECODE_TOKENS_PER_S": "400"}, tmp_path, 4, decode_tp)
    try:
        for _ in range(2):
            status, res = p.request(max_tokens=6)
            assert status == 200, res
        assert p.decode.state()["prefill_peers"] == {f"{HOST}:{p.bootstrap_port}": 2}
        wait_until(lambda: not stage_counts(p.prefill.url), 5, "the prefill queues to drain")
    finally:
        p.close()


@pytest.mark.parametrize("kind", ["pristine", "patched"])
def test_abort_reaches_every_prefill_rank(kind: str, sim_python: str, fake_env: dict[str, str],
                                          tmp_path: Path) -> None:
    """The decode's ABORT goes to every target prefill rank: on the affected versions every rank's reader
    dies (not only rank 0's), on the fixed ones every rank survives and the pair still serves."""
    env = {**fake_env, "PDFLEET_SIM_DECODE_TOKENS_PER_S": "400",
           "PDFLEET_SIM_FAKE_ABORT_KILLS_THREAD": "1" if kind == "pristine" else "0"}
    p = _tp_pair(sim_python, env, tmp_path, 4, 4)
    try:
        assert p.request()[0] == 200  # resolves all four prefill ranks
        body = {**chat_body("dsv4-sim", "never prefilled", 8, True), "bootstrap_host": HOST,
                "bootstrap_port": p.bootstrap_port, "bootstrap_room": 4343}
        open_and_drop(p.decode.url, "/v1/chat/completions", body, lambda: stage_counts(p.decode.url),
                      "the decode holding the request")
        wait_until(lambda: p.decode.state()["counters"]["sglang:num_transfer_failed_reqs_total"] == 1, 10,
                   "the decode-side abort")
        if kind == "pristine":
            wait_until(lambda: not any(_bootstrap_threads(p.prefill).values()), 5, "every rank's reader to die")
            # each rank's report whole (the simulator serializes them: its ranks are threads of one process)
            report = "Exception in thread bootstrap_thread:\nTraceback (most recent call last):\n"
            try:
                wait_until(lambda: p.prefill.log.read_text().count(report) == 4
                           and p.prefill.log.read_text().count("AssertionError: First message should be") == 4, 5,
                           "every rank's whole traceback in the log")
            except AssertionError as e:
                raise AssertionError(f"{e}; the prefill's log:\n{p.prefill.log.read_text()}") from None
        else:
            assert p.request()[0] == 200
            threads = _bootstrap_threads(p.prefill)
            assert len(threads) == 4 and all(threads.values()), threads
    finally:
        p.close()
