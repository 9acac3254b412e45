"""Command line and environment of a simulated SGLang worker.

The command line is the one our systemd units pass to ``python -m sglang.launch_server``; the
simulator accepts it unchanged (unknown flags are logged and ignored), so a rendered unit differs
only in the launch module. Everything the simulator needs beyond SGLang's flags comes from
``PDFLEET_SIM_*`` environment variables, read once into :class:`SimSettings`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# Defaults chosen for DeepSeek-V4-Flash at TP4 on RTX PRO 6000 Blackwell (see the stand-in workers'
# section in the report): prefill of a long agent prompt runs at roughly 20k tokens/s, i.e. 0.05 ms
# per prompt token, and one decode stream gets about 40 tokens/s at moderate batch sizes.
DEFAULT_PREFILL_MS_PER_TOKEN = 0.05
DEFAULT_DECODE_TOKENS_PER_S = 40.0
DEFAULT_MAX_TOKENS = 64
# SGLang aborts a streaming request this long after the client went away (create_abort_task).
DEFAULT_ABORT_DELAY_S = 2.0
# How often SGLang's tokenizer manager wakes up, with no output, to ask whether the client is still there
# (SGLANG_REQUEST_STATE_WAIT_TIMEOUT = EnvInt(4): srt/environ.py:799 in 0.5.15.post1, :1679 in 0.5.23).
DEFAULT_REQUEST_STATE_WAIT_TIMEOUT_S = 4.0
# A non-streaming request's partial output reaches the tokenizer every this many tokens
# (SGLANG_FORCE_STREAM_INTERVAL = EnvInt(50): srt/environ.py:366 in 0.5.15.post1, :688 in 0.5.23).
DEFAULT_FORCE_STREAM_INTERVAL = 50
# Fixed cost of one prefill forward pass on top of the per-token cost.
DEFAULT_PREFILL_OVERHEAD_MS = 2.0
DEFAULT_MAX_RUNNING_REQUESTS = 128
DEFAULT_CONTEXT_LENGTH = 1_048_576


class SettingsError(ValueError):
    """A ``PDFLEET_SIM_*`` variable or a flag has a value the simulator cannot use."""


@dataclass(frozen=True)
class SimSettings:
    """Simulator-only knobs, from ``PDFLEET_SIM_*`` environment variables."""

    prefill_ms_per_token: float = DEFAULT_PREFILL_MS_PER_TOKEN
    prefill_overhead_ms: float = DEFAULT_PREFILL_OVERHEAD_MS
    decode_tokens_per_s: float = DEFAULT_DECODE_TOKENS_PER_S
    max_tokens_default: int = DEFAULT_MAX_TOKENS
    abort_delay_s: float = DEFAULT_ABORT_DELAY_S
    # "sglang": the real NixlKVManager of the installed SGLang (via pdfleet.patch.nixlcpu);
    # "fake": a light stand-in for tests without the heavy runtime.
    kv_backend: str = "sglang"
    # Only for kv_backend=fake: emulate the affected versions, whose reader thread dies on ABORT.
    fake_abort_kills_thread: bool = False
    # Address the decode side advertises for its own ZMQ socket and the prefill rank socket
    # advertises to the bootstrap server. Empty: derived from --host.
    local_ip: str = ""
    # SGLang's own timeouts (the same variable names SGLang reads); 0 disables.
    bootstrap_timeout_s: float = 0.0
    waiting_timeout_s: float = 300.0
    request_state_wait_timeout_s: float = DEFAULT_REQUEST_STATE_WAIT_TIMEOUT_S
    force_stream_interval: int = DEFAULT_FORCE_STREAM_INTERVAL

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SimSettings:
        env = os.environ if env is None else env

        def num(name: str, default: float, minimum: float = 0.0) -> float:
            raw = env.get(name, "")
            if raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                raise SettingsError(f"{name}={raw!r} is not a number (unset it or give e.g. {default})") from None
            if value < minimum:
                raise SettingsError(f"{name}={raw!r} must be at least {minimum}")
            return value

        backend = env.get("PDFLEET_SIM_KV_BACKEND", "sglang") or "sglang"
        if backend not in ("sglang", "fake"):
            raise SettingsError(f"PDFLEET_SIM_KV_BACKEND={backend!r}: use 'sglang' or 'fake'")
        decode_rate = num("PDFLEET_SIM_DECODE_TOKENS_PER_S", DEFAULT_DECODE_TOKENS_PER_S)
        if decode_rate <= 0:
            raise SettingsError("PDFLEET_SIM_DECODE_TOKENS_PER_S must be above 0")
        return cls(
            prefill_ms_per_token=num("PDFLEET_SIM_PREFILL_MS_PER_TOKEN", DEFAULT_PREFILL_MS_PER_TOKEN),
            prefill_overhead_ms=num("PDFLEET_SIM_PREFILL_OVERHEAD_MS", DEFAULT_PREFILL_OVERHEAD_MS),
            decode_tokens_per_s=decode_rate,
            max_tokens_default=int(num("PDFLEET_SIM_MAX_TOKENS_DEFAULT", DEFAULT_MAX_TOKENS, 1)),
            abort_delay_s=num("PDFLEET_SIM_ABORT_DELAY_S", DEFAULT_ABORT_DELAY_S),
            kv_backend=backend,
            fake_abort_kills_thread=env.get("PDFLEET_SIM_FAKE_ABORT_KILLS_THREAD", "") in ("1", "true"),
            local_ip=env.get("PDFLEET_SIM_LOCAL_IP", ""),
            bootstrap_timeout_s=num("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 0.0),
            waiting_timeout_s=num("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300.0),
            request_state_wait_timeout_s=num("SGLANG_REQUEST_STATE_WAIT_TIMEOUT",
                                             DEFAULT_REQUEST_STATE_WAIT_TIMEOUT_S, 0.001),
            force_stream_interval=int(num("SGLANG_FORCE_STREAM_INTERVAL", DEFAULT_FORCE_STREAM_INTERVAL, 1)),
        )


@dataclass
class WorkerArgs:
    """The subset of SGLang's ``ServerArgs`` the simulator honours, under SGLang's field names."""

    model_path: str
    served_model_name: str = ""
    tokenizer_path: str | None = None
    trust_remote_code: bool = False
    disaggregation_mode: str = "null"
    disaggregation_transfer_backend: str = "mooncake"
    disaggregation_bootstrap_port: int = 8998
    disaggregation_ib_device: str | None = None
    tp_size: int = 1
    dp_size: int = 1
    pp_size: int = 1
    base_gpu_id: int = 0
    host: str = "127.0.0.1"
    port: int = 30000
    nccl_port: int | None = None
    dist_init_addr: str | None = None
    enable_metrics: bool = False
    mem_fraction_static: float | None = None
    log_level: str = "info"
    log_level_http: str | None = None
    log_requests: bool = False
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    moe_runner_backend: str = "auto"
    attention_backend: str | None = None
    kv_cache_dtype: str = "auto"
    page_size: int | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    context_length: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    load_balance_method: str = "round_robin"
    api_key: str | None = None
    random_seed: int | None = None
    skip_server_warmup: bool = False
    weight_version: str = "default"
    preferred_sampling_params: str | None = None
    unknown_flags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.served_model_name:
            self.served_model_name = self.model_path
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path

    @property
    def is_pd(self) -> bool:
        return self.disaggregation_mode in ("prefill", "decode")

    def effective_page_size(self) -> int:
        return self.page_size if self.page_size is not None else 1

    def effective_max_running_requests(self) -> int:
        if self.max_running_requests is not None:
            return self.max_running_requests
        return DEFAULT_MAX_RUNNING_REQUESTS

    def effective_context_length(self) -> int:
        return self.context_length if self.context_length is not None else DEFAULT_CONTEXT_LENGTH

    def as_server_args(self) -> dict[str, Any]:
        """The effective arguments as ``/server_info`` reports them (SGLang field names)."""
        out = asdict(self)
        out.pop("unknown_flags")
        out["page_size"] = self.effective_page_size()
        out["max_running_requests"] = self.effective_max_running_requests()
        out["context_length"] = self.effective_context_length()
        return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pdfleet_sim.worker",
        description="CPU stand-in for `python -m sglang.launch_server` (same flags; PDFLEET_SIM_* knobs).",
        allow_abbrev=False,
    )
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--served-model-name", dest="served_model_name", default="")
    p.add_argument("--tokenizer-path", dest="tokenizer_path", default=None)
    p.add_argument("--trust-remote-code", dest="trust_remote_code", action="store_true")
    p.add_argument(
        "--disaggregation-mode", dest="disaggregation_mode", choices=["null", "prefill", "decode"],
        default="null",
    )
    p.add_argument("--disaggregation-transfer-backend", dest="disaggregation_transfer_backend",
                   default="mooncake")
    p.add_argument("--disaggregation-bootstrap-port", dest="disaggregation_bootstrap_port", type=int,
                   default=8998)
    p.add_argument("--disaggregation-ib-device", dest="disaggregation_ib_device", default=None)
    p.add_argument("--tp-size", "--tp", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", "--dp", "--data-parallel-size", dest="dp_size", type=int, default=1)
    p.add_argument("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1)
    p.add_argument("--base-gpu-id", dest="base_gpu_id", type=int, default=0)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--nccl-port", dest="nccl_port", type=int, default=None)
    p.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None)
    p.add_argument("--enable-metrics", dest="enable_metrics", action="store_true")
    p.add_argument("--mem-fraction-static", dest="mem_fraction_static", type=float, default=None)
    p.add_argument("--log-level", dest="log_level", default="info")
    p.add_argument("--log-level-http", dest="log_level_http", default=None)
    p.add_argument("--log-requests", dest="log_requests", action="store_true")
    p.add_argument("--reasoning-parser", dest="reasoning_parser", default=None)
    p.add_argument("--tool-call-parser", dest="tool_call_parser", default=None)
    p.add_argument("--moe-runner-backend", dest="moe_runner_backend", default="auto")
    p.add_argument("--attention-backend", dest="attention_backend", default=None)
    p.add_argument("--kv-cache-dtype", dest="kv_cache_dtype", default="auto")
    p.add_argument("--page-size", dest="page_size", type=int, default=None)
    p.add_argument("--max-running-requests", dest="max_running_requests", type=int, default=None)
    p.add_argument("--max-total-tokens", dest="max_total_tokens", type=int, default=None)
    p.add_argument("--context-length", dest="context_length", type=int, default=None)
    p.add_argument("--chunked-prefill-size", dest="chunked_prefill_size", type=int, default=None)
    p.add_argument("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", dest="cuda_graph_max_bs", type=int,
                   default=None)
    p.add_argument("--load-balance-method", dest="load_balance_method", default="round_robin")
    p.add_argument("--api-key", dest="api_key", default=None)
    p.add_argument("--random-seed", dest="random_seed", type=int, default=None)
    p.add_argument("--skip-server-warmup", dest="skip_server_warmup", action="store_true")
    p.add_argument("--weight-version", dest="weight_version", default="default")
    p.add_argument("--preferred-sampling-params", dest="preferred_sampling_params", default=None)
    return p


def parse_args(argv: Sequence[str]) -> WorkerArgs:
    """Parse SGLang's command line; flags the simulator does not know land in ``unknown_flags``."""
    ns, unknown = build_parser().parse_known_args(list(argv))
    for name, value in (("--tp", ns.tp_size), ("--dp", ns.dp_size), ("--pp-size", ns.pp_size)):
        if value < 1:
            raise SettingsError(f"{name} {value}: must be at least 1")
    if ns.port == ns.disaggregation_bootstrap_port and ns.disaggregation_mode == "prefill":
        raise SettingsError(
            f"--port {ns.port} equals --disaggregation-bootstrap-port: give the bootstrap server its own port"
        )
    return WorkerArgs(**vars(ns), unknown_flags=unknown)
