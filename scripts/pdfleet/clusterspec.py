"""The inventory model: one typed description of the cluster, read from the `pdfleet_cluster` variable.

Every decision about the GPU split, ports and versions starts here; the planner checks the rules and
turns the model into per-host launch units.  Parsing never stops at the first problem: unknown keys
(typos), missing keys and wrong types are all collected and reported together.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

from pdfleet.errors import PlanError, Problem
from pdfleet.versions import CUDA_FLOOR, PINS

Role = Literal["prefill", "decode", "mono"]
Profile = Literal["pd-4p4d", "pd-multinode", "mono-tp8"]
Launcher = Literal["sglang", "sim"]
ModelSource = Literal["hub", "mirror", "standin"]


@dataclass(frozen=True)
class HostSpec:
    """A GPU host as the inventory expects it to be."""

    gpu_count: int
    gpu_model: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    gpu_memory_mib: int = 97887
    compute_capability: str = "12.0"


@dataclass(frozen=True)
class InstanceSpec:
    """One SGLang server: a prefill, a decode, or a monolithic (non-PD) instance."""

    name: str
    role: Role
    host: str
    gpus: list[int]
    tp: int
    port: int
    nccl_port: int
    dp: int = 1
    bootstrap_port: int | None = None
    mem_fraction_static: float = 0.70
    extra_args: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RouterSpec:
    """The router in front of the workers."""

    host: str
    port: int = 8000
    metrics_port: int = 29000
    policy: str = "cache_aware"
    prefill_policy: str = "cache_aware"
    decode_policy: str = "round_robin"
    health_check_interval_secs: int = 10
    drain_timeout_s: int = 120
    # smg's own health checks, circuit breaker, retries and shutdown (README "The gateway"; sglang-router 0.3.2
    # gets none of these flags). A worker is marked unhealthy after health_failure_threshold failed checks and
    # back after health_success_threshold good ones; it is never removed for it (pdfleet decides membership).
    health_failure_threshold: int = 3
    health_success_threshold: int = 2
    health_check_timeout_secs: int = 5
    # Attempts per request (1: no retry). smg retries by the worker's status code, after the worker may have run
    # the prefill and moved the KV cache: a retry there repeats that work on another pair.
    retry_max_attempts: int = 1
    # smg's circuit breaker: off by default. On, it took a prefill out of selection after 2 connection errors (a
    # kill -9) and held it out, healthy and restarted, for its whole timeout: health checks and the watchdog already
    # decide a worker's fate, and a verification right after a restart found that prefill unused (inconclusive).
    circuit_breaker: bool = False
    cb_failure_threshold: int = 10
    cb_timeout_duration_secs: int = 10
    # How often smg checks a worker it is registering (at its start: the workers of the command line) until it
    # answers: smg's default 30 s kept the gateway unready for up to 30 s after a restart beside its workers.
    worker_startup_check_interval_secs: int = 3
    # On SIGTERM smg stops taking requests and lets those in flight finish for this long; the unit's stop timeout
    # is this plus 15 s.
    shutdown_grace_s: int = 120
    # The gateway's API key (PDFLEET_ROUTER_API_KEY in pdfleet_units_secrets, Vault): on by default, so nobody who
    # reaches the port can add or delete workers. Off only by an explicit `api_key: false`.
    api_key: bool = True
    extra_args: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ModelSpec:
    """The served model and where its weights live on every worker host."""

    name: str
    path: str
    # hub: the 40-hex commit to download (pdfleet.valuerules refuses a branch or tag unless allow_branch_revision)
    revision: str = "main"
    source: ModelSource = "hub"  # hub: download (token from Vault); mirror: copy from mirror_path; standin: sim
    mirror_path: str = ""
    served_name: str = ""
    server_args: list[str] = field(default_factory=list)
    # true: accept a moving hub revision (a branch or tag: each download may bring other weights and model code)
    allow_branch_revision: bool = False


@dataclass(frozen=True)
class SglangSpec:
    """The pinned SGLang stack and the patch it carries."""

    version: str
    patch: str
    apply_patch: bool = True
    router_package: str = PINS["sglang_router_package"]
    router_version: str = PINS["sglang_router_version"]
    nixl_version: str = PINS["nixl_version"]
    venv: str = "/opt/pdfleet/venv"
    # The gateway's own venv on the router host (never the service venv: the router shares nothing with SGLang).
    router_venv: str = "/opt/pdfleet/gateway"
    launcher: Launcher = "sglang"
    log_level: str = "info"


@dataclass(frozen=True)
class CudaSpec:
    """CUDA toolkit and driver pins, and the floors the bundle refuses to go below."""

    version: str = PINS["cuda_version"]
    floor: str = CUDA_FLOOR
    driver_branch: int = PINS["cuda_driver_branch"]
    driver_version: str = PINS["cuda_driver_version"]


@dataclass(frozen=True)
class NixlSpec:
    """Environment for the NIXL transfer backend over UCX."""

    backend: str = "UCX"
    ucx_tls: str = "cuda_ipc,cuda_copy,sm,tcp"
    ucx_net_devices: str = ""
    bootstrap_timeout_s: int = 300
    waiting_timeout_s: int = 300
    # The decodes' heartbeat to their prefills (SGLang's SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL and
    # _MAX_FAILURE, same defaults); the planner derives every prefill's start hold-down from them.
    heartbeat_interval_s: float = 5.0
    heartbeat_max_failures: int = 2
    extra_env: dict[str, str] = field(default_factory=dict)
    # UCX's TCP transport listens on a random port of this range (UCX_TCP_PORT_RANGE, "first-last"; UCX takes the
    # part inside the host's net.ipv4.ip_local_port_range) instead of any ephemeral port, so the host firewall
    # (pdfleet.firewall) can close it to all but the planned peers; "" leaves the choice to the kernel.
    ucx_tcp_port_range: str = "40000-40999"


@dataclass(frozen=True)
class FirewallSpec:
    """The host firewall (nftables) the plan renders for every host with pdfleet units (pdfleet.firewall)."""

    enabled: bool = True
    # CIDRs of the machines that run verification, `pdfleet ops` and Ansible: allowed to every pdfleet port.
    operators: list[str] = field(default_factory=list)
    # CIDRs allowed to the gateway's serving port (the gateway key protects it).
    clients: list[str] = field(default_factory=lambda: ["0.0.0.0/0", "::/0"])
    # CIDRs allowed to Prometheus and the metrics ports (the router's, the watchdog's).
    scrapers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ServiceSpec:
    """How the units run: the unprivileged user, paths and resource limits."""

    user: str = "pdfleet"
    group: str = "pdfleet"
    config_dir: str = "/etc/pdfleet"
    state_dir: str = "/var/lib/pdfleet"
    limit_nofile: int = 65536
    limit_memlock: str = "infinity"
    restart_sec: int = 10
    start_timeout_s: int = 1800
    # Seconds a prefill unit waits before every start (ExecStartPre); unset: derived from the heartbeat.
    prefill_hold_down_s: int | None = None


@dataclass(frozen=True)
class ClusterSpec:
    """The whole cluster: the value of the inventory variable `pdfleet_cluster`."""

    profile: Profile
    hosts: dict[str, HostSpec]
    instances: list[InstanceSpec]
    router: RouterSpec
    model: ModelSpec
    sglang: SglangSpec
    cuda: CudaSpec = field(default_factory=CudaSpec)
    nixl: NixlSpec = field(default_factory=NixlSpec)
    service: ServiceSpec = field(default_factory=ServiceSpec)
    firewall: FirewallSpec = field(default_factory=FirewallSpec)


ROOT_VARIABLE = "pdfleet_cluster"

# The most values (mappings, lists and scalars together) a model may hold: a fleet of 1,000 8-GPU hosts with
# eight instances each holds about 140,000 (tests/bench/fleet_inventory.py); a YAML alias bomb expands to
# billions and would otherwise take hours to walk (counting stops just past this, in well under a second).
MAX_VALUES = 500_000
# Any integer of the model fits here (ports, counts, seconds, MiB); a field's own range is in BOUNDS.
INT_RANGE = (-(2**31), 2**31 - 1)
# Characters that must never reach a unit or environment file: a newline there starts a new directive.
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
PORT = (1, 65535)
# Each numeric field's range (inclusive), by model class and field.
BOUNDS: dict[tuple[type, str], tuple[float, float]] = {
    (HostSpec, "gpu_count"): (1, 64),
    (HostSpec, "gpu_memory_mib"): (1, 2**24),
    (InstanceSpec, "tp"): (1, 64),
    (InstanceSpec, "dp"): (1, 64),
    (InstanceSpec, "port"): PORT,
    (InstanceSpec, "nccl_port"): PORT,
    (InstanceSpec, "bootstrap_port"): PORT,
    (InstanceSpec, "mem_fraction_static"): (0.01, 0.99),
    (RouterSpec, "port"): PORT,
    (RouterSpec, "metrics_port"): PORT,
    (RouterSpec, "health_check_interval_secs"): (1, 3600),
    (RouterSpec, "drain_timeout_s"): (0, 86400),
    (RouterSpec, "health_failure_threshold"): (1, 1000),
    (RouterSpec, "health_success_threshold"): (1, 1000),
    (RouterSpec, "health_check_timeout_secs"): (1, 3600),
    (RouterSpec, "retry_max_attempts"): (1, 100),
    (RouterSpec, "cb_failure_threshold"): (1, 1_000_000),
    (RouterSpec, "cb_timeout_duration_secs"): (1, 86400),
    (RouterSpec, "worker_startup_check_interval_secs"): (1, 3600),
    (RouterSpec, "shutdown_grace_s"): (0, 86400),
    (CudaSpec, "driver_branch"): (1, 10_000),
    (NixlSpec, "bootstrap_timeout_s"): (1, 86400),
    (NixlSpec, "waiting_timeout_s"): (1, 86400),
    (ServiceSpec, "limit_nofile"): (1024, 2**20),
    (ServiceSpec, "restart_sec"): (1, 3600),
    (ServiceSpec, "start_timeout_s"): (1, 86400),
    (ServiceSpec, "prefill_hold_down_s"): (0, 3600),
}


def short(value: object, limit: int = 60) -> str:
    """A value for an error message: its repr, cut to `limit` characters (a model can be huge)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def short_name(value: object, limit: int = 40) -> str:
    """A key or name for a field path in a message: itself, or cut to `limit` characters with its repr."""
    text = str(value)
    return text if len(text) <= limit and not CONTROL_CHARS.search(text) else short(value, limit)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def count_values(value: object, limit: int = MAX_VALUES) -> int:
    """How many values `value` holds, counted up to just past `limit` (shared references count each time)."""
    count, stack = 0, [value]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return count


def parse_cluster(data: object) -> ClusterSpec:
    """Parse the raw `pdfleet_cluster` value; raise PlanError listing every problem found."""
    problems: list[Problem] = []
    if count_values(data) > MAX_VALUES:
        raise PlanError([Problem(ROOT_VARIABLE, f"holds more than {MAX_VALUES} values (a YAML alias that expands "
                                 "again and again?)", "write the model out plainly; a fleet of 1,000 hosts "
                                 "needs under 150,000 values")])
    result = _parse(ClusterSpec, data, ROOT_VARIABLE, problems)
    if problems:
        raise PlanError(problems)
    assert isinstance(result, ClusterSpec)
    return result


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " or ".join(repr(a) for a in get_args(tp))
    if origin in (list, dict):
        return f"a {origin.__name__}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _parse(tp: Any, value: object, path: str, problems: list[Problem]) -> object:
    """Convert `value` to `tp`, appending a Problem for each mismatch; returns None on failure."""
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _parse_dataclass(tp, value, path, problems)
    if origin is Literal:
        if value in get_args(tp):
            return value
    elif origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            trial: list[Problem] = []
            out = _parse(arg, value, path, trial)
            if not trial:
                return out
    elif origin is list:
        if isinstance(value, list):
            (item_tp,) = get_args(tp)
            return [_parse(item_tp, v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    elif origin is dict:
        if isinstance(value, dict):
            _key_tp, val_tp = get_args(tp)
            out = {}
            for k, v in value.items():
                key = _parse(str, k, f"{path} key {short_name(k)}", problems)
                if key is not None:
                    out[key] = _parse(val_tp, v, f"{path}.{key}", problems)
            return out
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if (isinstance(value, int) and not INT_RANGE[0] <= value <= INT_RANGE[1]) or not math.isfinite(value):
                problems.append(Problem(path, f"{short(value)} is not a usable number", f"set {path} to a finite "
                                        "number in its range"))
                return None
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not INT_RANGE[0] <= value <= INT_RANGE[1]:
                problems.append(Problem(path, f"{short(value)} is out of range", f"set {path} to a number in its "
                                        "range"))
                return None
            return value
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            text = str(value)
            bad = CONTROL_CHARS.search(text)
            if bad:
                problems.append(Problem(path, f"holds the control character {bad.group()!r} at offset {bad.start()} "
                                        f"({short(text)}); a newline in a unit file would start a new directive",
                                        f"remove it from {path}"))
                return None
            return text
    else:  # pragma: no cover - a model field of a type this parser does not know
        raise TypeError(f"unsupported model type {tp!r} at {path}")
    problems.append(
        Problem(path, f"expected {_type_name(tp)}, found {short(value)}", f"set {path} to {_type_name(tp)}")
    )
    return None


@functools.cache
def _model_fields(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """A model class's field types and fields, worked out once per class (not once per host or instance)."""
    return typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}


def _parse_dataclass(cls: type, value: object, path: str, problems: list[Problem]) -> object:
    if not isinstance(value, dict):
        problems.append(Problem(path, f"expected a mapping, found {short(value)}", f"make {path} a mapping"))
        return None
    hints, fields = _model_fields(cls)
    for key in value:
        if key not in fields:
            known = ", ".join(sorted(fields))
            problems.append(
                Problem(f"{path}.{short_name(key)}", "unknown key (a typo?)", f"remove it or use one of: {known}")
            )
    kwargs: dict[str, object] = {}
    ok = True
    for name, f in fields.items():
        sub = f"{path}.{name}"
        if name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                problems.append(Problem(sub, "missing", f"add {sub} ({_type_name(hints[name])})"))
                ok = False
            continue
        before = len(problems)
        kwargs[name] = _parse(hints[name], value[name], sub, problems)
        bounds = BOUNDS.get((cls, name))
        parsed = kwargs[name]
        if bounds and isinstance(parsed, int | float) and not bounds[0] <= parsed <= bounds[1]:
            span = f"{_num(bounds[0])}-{_num(bounds[1])}"
            problems.append(Problem(sub, f"is {_num(parsed)}, outside {span}", f"set {sub} within {span}"))
        ok = ok and len(problems) == before
    if not ok:
        return None
    try:
        return cls(**kwargs)
    except TypeError:  # an earlier problem left a field unusable
        return None
