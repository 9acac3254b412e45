"""The inventory model: one typed description of the cluster, read from the `pdfleet_cluster` variable.

Every decision about the GPU split, ports and versions starts here; the planner checks the rules and
turns the model into per-host launch units.  Parsing never stops at the first problem: unknown keys
(typos), missing keys and wrong types are all collected and reported together.
"""

from __future__ import annotations

import dataclasses
import types
import typing
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
    api_key: bool = False
    extra_args: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ModelSpec:
    """The served model and where its weights live on every worker host."""

    name: str
    path: str
    revision: str = "main"
    source: ModelSource = "hub"  # hub: download (token from Vault); mirror: copy from mirror_path; standin: sim
    mirror_path: str = ""
    served_name: str = ""
    server_args: list[str] = field(default_factory=list)


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


ROOT_VARIABLE = "pdfleet_cluster"


def parse_cluster(data: object) -> ClusterSpec:
    """Parse the raw `pdfleet_cluster` value; raise PlanError listing every problem found."""
    problems: list[Problem] = []
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
            return {str(k): _parse(val_tp, v, f"{path}.{k}", problems) for k, v in value.items()}
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
    else:  # pragma: no cover - a model field of a type this parser does not know
        raise TypeError(f"unsupported model type {tp!r} at {path}")
    problems.append(
        Problem(path, f"expected {_type_name(tp)}, found {value!r}", f"set {path} to {_type_name(tp)}")
    )
    return None


def _parse_dataclass(cls: type, value: object, path: str, problems: list[Problem]) -> object:
    if not isinstance(value, dict):
        problems.append(Problem(path, f"expected a mapping, found {value!r}", f"make {path} a mapping"))
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in value:
        if key not in fields:
            known = ", ".join(sorted(fields))
            problems.append(
                Problem(f"{path}.{key}", "unknown key (a typo?)", f"remove it or use one of: {known}")
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
        ok = ok and len(problems) == before
    if not ok:
        return None
    try:
        return cls(**kwargs)
    except TypeError:  # an earlier problem left a field unusable
        return None
