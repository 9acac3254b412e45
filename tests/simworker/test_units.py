"""Pure-Python parts of the simulated worker: flags, settings, token plans, metrics text."""

from __future__ import annotations

import re

import pytest
from pdfleet_sim.worker import engine
from pdfleet_sim.worker.args import SettingsError, SimSettings, parse_args
from pdfleet_sim.worker.kv import DecodePeer, KVPoll, ThreadState, TPPrefillKV
from pdfleet_sim.worker.metrics import Metrics
from pdfleet_sim.worker.pd import BootstrapError, target_tp_ranks

# The command line our systemd units pass to `python -m sglang.launch_server` (planner._worker_unit).
UNIT_ARGV = [
    "--model-path", "/srv/models/DeepSeek-V4-Flash", "--served-model-name", "deepseek-v4-flash",
    "--host", "10.77.0.11", "--port", "30000", "--nccl-port", "31000", "--tp", "4", "--dp", "1",
    "--base-gpu-id", "0", "--mem-fraction-static", "0.7", "--enable-metrics", "--log-level", "info",
    "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl",
    "--disaggregation-bootstrap-port", "8998", "--trust-remote-code", "--reasoning-parser", "deepseek-v4",
    "--tool-call-parser", "deepseekv4", "--moe-runner-backend", "marlin", "--page-size", "256",
    "--cuda-graph-max-bs-decode", "32",
]


def test_unit_command_line_parses_to_sglang_field_names() -> None:
    args = parse_args(UNIT_ARGV)
    info = args.as_server_args()
    assert info["disaggregation_mode"] == "prefill"
    assert info["disaggregation_transfer_backend"] == "nixl"
    assert info["disaggregation_bootstrap_port"] == 8998
    assert (info["tp_size"], info["dp_size"], info["base_gpu_id"]) == (4, 1, 0)
    assert info["served_model_name"] == "deepseek-v4-flash"
    assert info["model_path"] == "/srv/models/DeepSeek-V4-Flash"
    assert info["page_size"] == 256
    assert info["mem_fraction_static"] == 0.7
    assert info["moe_runner_backend"] == "marlin"
    assert info["cuda_graph_max_bs"] == 32
    assert info["enable_metrics"] is True and info["trust_remote_code"] is True
    assert args.unknown_flags == []


def test_unknown_flags_are_kept_not_fatal() -> None:
    args = parse_args(["--model-path", "m", "--enable-dp-attention", "--speculative-algorithm", "EAGLE"])
    assert args.unknown_flags == ["--enable-dp-attention", "--speculative-algorithm", "EAGLE"]
    assert args.served_model_name == "m"
    assert args.disaggregation_mode == "null"


def test_prefill_port_clash_is_refused() -> None:
    with pytest.raises(SettingsError, match="bootstrap"):
        parse_args(["--model-path", "m", "--disaggregation-mode", "prefill", "--port", "8998"])


def test_settings_defaults_and_validation() -> None:
    s = SimSettings.from_env({})
    assert (s.prefill_ms_per_token, s.decode_tokens_per_s, s.max_tokens_default) == (0.05, 40.0, 64)
    assert s.kv_backend == "sglang" and s.waiting_timeout_s == 300.0 and s.bootstrap_timeout_s == 0.0
    s = SimSettings.from_env({"PDFLEET_SIM_PREFILL_MS_PER_TOKEN": "0.2", "PDFLEET_SIM_DECODE_TOKENS_PER_S": "10",
                              "PDFLEET_SIM_MAX_TOKENS_DEFAULT": "7", "PDFLEET_SIM_KV_BACKEND": "fake"})
    assert (s.prefill_ms_per_token, s.decode_tokens_per_s, s.max_tokens_default, s.kv_backend) == (0.2, 10, 7, "fake")
    for env in ({"PDFLEET_SIM_DECODE_TOKENS_PER_S": "0"}, {"PDFLEET_SIM_PREFILL_MS_PER_TOKEN": "fast"},
                {"PDFLEET_SIM_KV_BACKEND": "mooncake"}, {"PDFLEET_SIM_MAX_TOKENS_DEFAULT": "0"}):
        with pytest.raises(SettingsError):
            SimSettings.from_env(env)


def test_plans_from_native_and_openai_bodies() -> None:
    s = SimSettings.from_env({})
    p = engine.plan_generate({"input_ids": list(range(1024)), "sampling_params": {"max_new_tokens": 256},
                              "stream": True, "bootstrap_host": "10.0.0.1", "bootstrap_port": 8998,
                              "bootstrap_room": 123456789}, s)
    assert (p.prompt_tokens, p.max_new_tokens, p.stream, p.has_bootstrap) == (1024, 256, True, True)
    assert p.bootstrap_room == 123456789
    c = engine.plan_chat({"messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 5,
                          "stream": True, "stream_options": {"include_usage": True}}, s)
    assert c.prompt_tokens == 4 + 100 and c.max_new_tokens == 5 and c.include_usage and not c.has_bootstrap
    assert engine.plan_chat({"messages": [{"role": "user", "content": "hi"}]}, s).max_new_tokens == 64
    for bad in ({}, {"text": ["a", "b"]}, {"text": "a", "sampling_params": {"max_new_tokens": -1}},
                {"text": "a", "bootstrap_room": "x", "bootstrap_host": "h"}):
        with pytest.raises(engine.RequestError):
            engine.plan_generate(bad, s)
    with pytest.raises(engine.RequestError):
        engine.plan_chat({"messages": []}, s)


def test_timing_model() -> None:
    s = SimSettings.from_env({})
    # 8k-token agent prompt: 2 ms + 8192 * 0.05 ms
    assert engine.prefill_seconds(8192, s) == pytest.approx(0.4116)
    assert engine.token_interval(s) == pytest.approx(0.025)


def test_metrics_text_uses_sglang_names_and_labels() -> None:
    m = Metrics(model_name="deepseek-v4-flash", disaggregation_mode="decode")
    m.inc("sglang:generation_tokens_total", 5)
    m.inc("sglang:num_aborted_requests_total")
    text = m.render({"sglang:num_decode_transfer_queue_reqs": 3}, [("bootstrap_thread", False)])
    sched = 'model_name="deepseek-v4-flash",engine_type="decode",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
    tok = 'model_name="deepseek-v4-flash",engine_type="decode"'
    assert f"sglang:num_decode_transfer_queue_reqs{{{sched}}} 3.0" in text
    assert f"sglang:generation_tokens_total{{{tok}}} 5.0" in text
    assert f"sglang:num_aborted_requests_total{{{tok}}} 1.0" in text
    for name in ("num_running_reqs", "num_queue_reqs", "num_prefill_bootstrap_queue_reqs",
                 "num_prefill_inflight_queue_reqs", "num_decode_prealloc_queue_reqs",
                 "num_bootstrap_failed_reqs_total", "num_transfer_failed_reqs_total"):
        assert re.search(rf"^sglang:{name}\{{", text, re.M), name
    assert 'pdfleet_sim:kv_thread_alive{model_name="deepseek-v4-flash",engine_type="decode",' \
           'thread="bootstrap_thread"} 0.0' in text
    with pytest.raises(KeyError):
        m.inc("sglang:nope")


def test_package_imports_without_heavy_deps() -> None:
    import subprocess
    import sys

    code = ("import sys, pdfleet_sim.worker, pdfleet_sim.worker.args, pdfleet_sim.worker.engine, "
            "pdfleet_sim.worker.metrics, pdfleet_sim.worker.kv, pdfleet_sim.testing.localpd, "
            "pdfleet_sim.testing.simclient, "
            "pdfleet_sim.worker.kvreal, pdfleet_sim.worker.kvfake\n"
            "heavy = ('torch', 'sglang', 'aiohttp', 'zmq', 'yaml', 'pdfleet_sim.hosts')\n"
            "bad = [m for m in heavy if m in sys.modules]\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(("decode_tp", "prefill_tp", "expected"), [
    (4, 4, {0: ([0], 1), 1: ([1], 1), 2: ([2], 1), 3: ([3], 1)}),
    (8, 4, {0: ([0], 2), 1: ([0], 2), 6: ([3], 2), 7: ([3], 2)}),
    (2, 4, {0: ([0, 1], 1), 1: ([2, 3], 1)}),
    (1, 4, {0: ([0, 1, 2, 3], 1)}),
])
def test_target_tp_ranks_follow_sglang(decode_tp: int, prefill_tp: int, expected: dict) -> None:
    for decode_rank, want in expected.items():
        assert target_tp_ranks(decode_rank, decode_tp, prefill_tp) == want
    # Together the decode ranks cover every prefill rank, each exactly required_dst_info_num times.
    hits = [t for r in range(decode_tp) for t in target_tp_ranks(r, decode_tp, prefill_tp)[0]]
    required = target_tp_ranks(0, decode_tp, prefill_tp)[1]
    assert sorted(set(hits)) == list(range(prefill_tp)) and all(hits.count(t) == required for t in set(hits))


def test_target_tp_ranks_refuse_sizes_that_do_not_divide() -> None:
    with pytest.raises(BootstrapError, match="decode TP 3 and prefill TP 4"):
        target_tp_ranks(0, 3, 4)


def test_tp_prefill_polls_like_an_all_reduce_min() -> None:
    ranks = [_Rank(KVPoll.WaitingForInput), _Rank(KVPoll.Bootstrapping), _Rank(KVPoll.WaitingForInput)]
    kv = TPPrefillKV(ranks)  # type: ignore[list-item]
    assert kv.poll(1) == KVPoll.Bootstrapping  # one rank still lacks its decode's transfer info
    ranks[1].status = KVPoll.WaitingForInput
    assert kv.poll(1) == KVPoll.WaitingForInput
    ranks[2].status = KVPoll.Failed
    assert kv.poll(1) == KVPoll.Failed  # a failure on any rank fails the room
    assert [t.name for t in kv.threads()] == ["bootstrap_thread@tp0", "bootstrap_thread@tp1", "bootstrap_thread@tp2"]
    assert [p.port for p in kv.decode_peers(1)] == [7]  # the same decode endpoint, reported by every rank, once


class _Rank:
    def __init__(self, status: int) -> None:
        self.status = status

    def poll(self, room: int) -> int:
        return self.status

    def threads(self) -> list[ThreadState]:
        return [ThreadState("bootstrap_thread", True)]

    def decode_peers(self, room: int) -> list[DecodePeer]:
        return [DecodePeer("10.0.0.1", 7, "d-tp0"), DecodePeer("10.0.0.1", 7, "d-tp1")]
