"""The planner: checks every rule of the inventory model and turns it into per-host launch units.

This is the only place where the GPU split, ports and command lines are decided.  The CLI (`pdfleet
plan`/`render`) and Ansible (the `pdfleet_plan` filter) both call `build_plan`, so they cannot drift.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from pdfleet import firewall, valuerules
from pdfleet.clusterspec import ClusterSpec, InstanceSpec, parse_cluster
from pdfleet.errors import PlanError, Problem
from pdfleet.patch import manifest as patches
from pdfleet.patch.errors import UnsupportedVersionError
from pdfleet.paths import PATCH_DIR, package_relative
from pdfleet.ucx import concrete_transports, misplaced_words, unknown_words, valid_names
from pdfleet.versions import (
    CUDA_DRIVER_FLOORS,
    CUDA_FLOOR,
    LEASE_DIR,
    RESERVED_PORTS,
    SUPPORTED_LOG_LEVELS,
    router_module,
    version_tuple,
)

PD_PROFILES = ("pd-4p4d", "pd-multinode")
_ENV_REF = re.compile(r"\$\{[A-Z][A-Z0-9_]*\}")  # left for systemd to expand from an EnvironmentFile
ROUTER_UNIT = "pdfleet-router"


@dataclass(frozen=True)
class Unit:
    """One systemd unit on one host, with everything its template needs."""

    name: str
    kind: str  # "worker" or "router"
    role: str  # prefill, decode, mono, router
    instance: str
    host: str
    address: str
    description: str
    exec_start: list[str]
    environment: dict[str, str]
    gpus: list[int] = field(default_factory=list)
    cuda_visible_devices: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    after: list[str] = field(default_factory=list)
    timeout_stop_s: int = 30
    url: str = ""
    # First-class facts about a worker, so provisioning, conformance and verification read fields instead of
    # parsing argv or environment strings (the same values are in exec_start/environment for SGLang).
    tp: int = 0
    dp: int = 0
    ucx_tls: list[str] = field(default_factory=list)  # UCX_TLS words, in order (PD workers only)
    ucx_net_devices: list[str] = field(default_factory=list)
    required_transports: list[str] = field(default_factory=list)  # what `ucx_info -d` must list on this host
    start_hold_down_s: int = 0  # ExecStartPre sleep before every start (prefill units: see prefill_hold_down)
    # The pdfleet_units_secrets names this unit reads (its own 0600 secrets file): only what it needs, so a worker
    # running model code never holds the gateway's key.
    secrets: list[str] = field(default_factory=list)
    # Run once the main process has started (systemd's ExecStartPost); smg's gateway: its registrar (members_argv)
    exec_start_post: list[str] = field(default_factory=list)

    @property
    def exec_start_line(self) -> str:
        return " ".join(systemd_quote(a) for a in self.exec_start)

    @property
    def exec_start_post_line(self) -> str:
        return " ".join(systemd_quote(a) for a in self.exec_start_post)


@dataclass(frozen=True)
class Plan:
    """The result of planning: what runs where, and the settings every unit shares."""

    profile: str
    model: dict[str, object]
    sglang: dict[str, object]
    cuda: dict[str, object]
    service: dict[str, object]
    router_url: str
    hosts: dict[str, list[Unit]]
    host_specs: dict[str, dict[str, object]] = field(default_factory=dict)  # what each GPU host should have
    # The pin's hardware facts (its manifest's `hardware` section) applied to the units, each with its source.
    hardware_facts: list[dict[str, object]] = field(default_factory=list)
    # The router's settings (the inventory's router section with the model's defaults): the drain timeout the
    # pruning and the rollout wait for, its ports and policies.
    router: dict[str, object] = field(default_factory=dict)
    # The host firewall's settings (pdfleet_cluster.firewall); pdfleet.firewall makes each host's rules from them.
    firewall: dict[str, object] = field(default_factory=dict)

    def units(self) -> list[Unit]:
        return [u for units in self.hosts.values() for u in units]

    def gateway_host(self) -> str | None:
        """The router's host (where the pair leases are); None when the plan has no router unit."""
        return next((h for h, units in self.hosts.items() if any(u.kind == "router" for u in units)), None)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["gateway_host"] = self.gateway_host()
        for host, units in self.hosts.items():
            out["hosts"][host] = [dict(asdict(u), exec_start_line=u.exec_start_line,
                                       exec_start_post_line=u.exec_start_post_line) for u in units]
        return out


def systemd_quote(arg: str) -> str:
    """Quote one ExecStart argument so systemd splits it back into exactly `arg`."""
    if arg and (_ENV_REF.fullmatch(arg) or not any(c in arg for c in " \t\"'\\;$%")):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$").replace("%", "%%")
    return f'"{escaped}"'


def build_plan(
    raw_cluster: object,
    inventory_hosts: Mapping[str, str],
    supported_patches: Mapping[str, str],
    source: str = "",
) -> Plan:
    """Validate `raw_cluster` against the inventory and the patch series, then plan it.

    `inventory_hosts` maps each inventory host name to its address (`ansible_host`);
    `supported_patches` maps each SGLang version that has a patch to that patch's id.
    Raises PlanError naming every problem at once.
    """
    try:
        cluster = parse_cluster(raw_cluster)
    except PlanError as exc:
        raise PlanError(exc.problems, source) from None
    problems = check_rules(cluster, inventory_hosts, supported_patches)
    if problems:
        raise PlanError(problems, source)
    return _plan(cluster, inventory_hosts)


def check_rules(
    c: ClusterSpec, inventory_hosts: Mapping[str, str], supported_patches: Mapping[str, str]
) -> list[Problem]:
    """Every rule of the model, each violation one Problem; an empty list means the model is sound."""
    problems: list[Problem] = []
    problems += _check_hosts(c, inventory_hosts)
    problems += _check_instances(c)
    problems += _check_ports(c)
    problems += _check_roles(c)
    problems += _check_versions(c, supported_patches)
    problems += _check_heartbeat(c)
    problems += _check_hardware_limits(c)
    problems += _check_ucx_tls(c)
    problems += valuerules.check_values(c, inventory_hosts)
    problems += firewall.check_firewall(c, inventory_hosts)
    return problems


# SGLang's decode clamps its heartbeat settings (conn.py: 0.5.15.post1 lines 196-202, 0.5.23 lines 479-485).
HEARTBEAT_MIN_INTERVAL_S = 2.0
HEARTBEAT_MIN_FAILURES = 1


def heartbeat_forget_s(c: ClusterSpec) -> int:
    """Seconds a prefill must stay unreachable so that every decode has forgotten it.

    A decode checks each known prefill every interval and drops it after max_failures misses in a row
    (pdfleet_sim.worker.heartbeat cites the code). A prefill down for interval x max_failures can still
    slip between the checks by the time the checks themselves take; one more interval is the margin.
    """
    interval = max(c.nixl.heartbeat_interval_s, HEARTBEAT_MIN_INTERVAL_S)
    failures = max(c.nixl.heartbeat_max_failures, HEARTBEAT_MIN_FAILURES)
    return math.ceil(interval * (failures + 1))


def prefill_hold_down(c: ClusterSpec) -> int:
    """The prefill units' wait before every start: the inventory's value, or the heartbeat's forget time."""
    return c.service.prefill_hold_down_s if c.service.prefill_hold_down_s is not None else heartbeat_forget_s(c)


def _check_heartbeat(c: ClusterSpec) -> list[Problem]:
    out: list[Problem] = []
    n = c.nixl
    if n.heartbeat_interval_s < HEARTBEAT_MIN_INTERVAL_S:
        out.append(Problem("pdfleet_cluster.nixl.heartbeat_interval_s", f"is {n.heartbeat_interval_s:g} s, but SGLang "
                           f"raises the decodes' heartbeat interval to at least {HEARTBEAT_MIN_INTERVAL_S:g} s",
                           f"set it to {HEARTBEAT_MIN_INTERVAL_S:g} or more"))
    if n.heartbeat_max_failures < HEARTBEAT_MIN_FAILURES:
        out.append(Problem("pdfleet_cluster.nixl.heartbeat_max_failures", f"is {n.heartbeat_max_failures}, but SGLang "
                           "declares a prefill dead after at least 1 missed heartbeat", "set it to 1 or more"))
    hold = c.service.prefill_hold_down_s
    forget = heartbeat_forget_s(c)
    if c.profile in PD_PROFILES and hold is not None and hold < forget:
        out.append(Problem(
            "pdfleet_cluster.service.prefill_hold_down_s",
            f"is {hold} s, but a decode forgets a dead prefill only after heartbeat_interval_s "
            f"{n.heartbeat_interval_s:g} s x (heartbeat_max_failures {n.heartbeat_max_failures} + 1 margin) = "
            f"{forget} s; a prefill back sooner leaves the decodes holding the dead process's registration and "
            "every request of its pairs fails",
            f"set it to at least {forget} (or remove it: the planner derives it), or lower "
            "pdfleet_cluster.nixl.heartbeat_interval_s / heartbeat_max_failures"))
    return out


def _check_hosts(c: ClusterSpec, inventory_hosts: Mapping[str, str]) -> list[Problem]:
    out: list[Problem] = []
    known = ", ".join(sorted(inventory_hosts)) or "(none)"
    for name, spec in c.hosts.items():
        if name not in inventory_hosts:
            out.append(Problem(f"pdfleet_cluster.hosts.{name}", "is not a host of this inventory",
                               f"add {name} to the inventory or use one of: {known}", host=name))
        if spec.gpu_count < 1:
            out.append(Problem(f"pdfleet_cluster.hosts.{name}.gpu_count", f"is {spec.gpu_count}",
                               "set the number of GPUs the host really has (8 on the target hosts)", host=name))
    if c.router.host not in inventory_hosts:
        out.append(Problem("pdfleet_cluster.router.host", f"{c.router.host!r} is not a host of this inventory",
                           f"use one of: {known}", host=c.router.host))
    return out


def _check_instances(c: ClusterSpec) -> list[Problem]:
    out: list[Problem] = []
    seen_names: set[str] = set()
    owners: dict[tuple[str, int], str] = {}
    for i, inst in enumerate(c.instances):
        var = f"pdfleet_cluster.instances[{i}] ({inst.name})"
        if inst.name in seen_names:
            out.append(Problem(f"{var}.name", f"instance name {inst.name!r} is used twice",
                               "give every instance a unique name", host=inst.host))
        seen_names.add(inst.name)
        if not inst.name.replace("-", "").replace("_", "").isalnum():
            out.append(Problem(f"{var}.name", f"{inst.name!r} cannot be part of a unit name",
                               "use letters, digits, '-' and '_' only", host=inst.host))
        host = c.hosts.get(inst.host)
        if host is None:
            out.append(Problem(f"{var}.host", f"{inst.host!r} is not in pdfleet_cluster.hosts",
                               f"add {inst.host} under pdfleet_cluster.hosts or use one of: "
                               f"{', '.join(sorted(c.hosts))}", host=inst.host))
        if not inst.gpus:
            out.append(Problem(f"{var}.gpus", "is empty", "list the GPU indices this instance owns",
                               host=inst.host))
        if len(set(inst.gpus)) != len(inst.gpus):
            out.append(Problem(f"{var}.gpus", f"{inst.gpus} lists a GPU twice",
                               "list each GPU index once", host=inst.host))
        for g in sorted(set(inst.gpus)):
            if host is not None and not 0 <= g < host.gpu_count:
                out.append(Problem(f"{var}.gpus", f"GPU {g} is beyond the host's {host.gpu_count} GPUs "
                                   f"(valid: 0-{host.gpu_count - 1})",
                                   "use an index below pdfleet_cluster.hosts."
                                   f"{inst.host}.gpu_count", host=inst.host))
            other = owners.get((inst.host, g))
            if other is not None and other != inst.name:
                out.append(Problem(f"{var}.gpus", f"GPU {g} is also owned by {other}",
                                   "give each instance its own GPUs", host=inst.host))
            owners[(inst.host, g)] = inst.name
        if inst.tp < 1 or inst.dp < 1 or inst.tp * inst.dp != len(inst.gpus):
            out.append(Problem(f"{var}.tp", f"tp {inst.tp} x dp {inst.dp} = {inst.tp * inst.dp} but the "
                               f"instance has {len(inst.gpus)} GPUs",
                               "make tp x dp equal the number of GPUs listed", host=inst.host))
        if not 0.0 < inst.mem_fraction_static < 1.0:
            out.append(Problem(f"{var}.mem_fraction_static", f"is {inst.mem_fraction_static}",
                               "use a fraction between 0 and 1 (0.70 is the verified value)", host=inst.host))
        if inst.role == "prefill" and inst.bootstrap_port is None:
            out.append(Problem(f"{var}.bootstrap_port", "a prefill instance has no bootstrap port",
                               "set bootstrap_port (8998 is SGLang's default)", host=inst.host))
        if inst.role != "prefill" and inst.bootstrap_port is not None:
            out.append(Problem(f"{var}.bootstrap_port", f"only prefill instances take one ({inst.role})",
                               "remove bootstrap_port from this instance", host=inst.host))
    return out


def _instance_ports(inst: InstanceSpec) -> dict[str, int]:
    ports = {"port": inst.port, "nccl_port": inst.nccl_port}
    if inst.bootstrap_port is not None:
        ports["bootstrap_port"] = inst.bootstrap_port
    return ports


def _check_ports(c: ClusterSpec) -> list[Problem]:
    out: list[Problem] = []
    used: dict[tuple[str, int], str] = {}
    claims = [("pdfleet_cluster.router", c.router.host, "router",
               {"port": c.router.port, "metrics_port": c.router.metrics_port})]
    claims += [(f"pdfleet_cluster.instances[{i}] ({inst.name})", inst.host, inst.name, _instance_ports(inst))
               for i, inst in enumerate(c.instances)]
    for var, host, owner, ports in claims:
        for key, port in ports.items():
            name = f"{var}.{key}"
            if not 1024 <= port <= 65535:
                out.append(Problem(name, f"port {port} is outside 1024-65535",
                                   "pick an unprivileged port", host=host))
            other = used.get((host, port)) or (RESERVED_PORTS.get(port) if host == c.router.host else None)
            if other is not None:
                out.append(Problem(name, f"port {port} is already taken by {other} on this host",
                                   "give every port on a host a single owner", host=host))
            used[(host, port)] = f"{owner}.{key}"
    return out


def _check_roles(c: ClusterSpec) -> list[Problem]:
    out: list[Problem] = []
    roles = [inst.role for inst in c.instances]
    if not c.instances:
        out.append(Problem("pdfleet_cluster.instances", "the router has no workers",
                           "define at least one instance for the router to send requests to",
                           host=c.router.host))
        return out
    if c.profile in PD_PROFILES:
        for needed in ("prefill", "decode"):
            if needed not in roles:
                out.append(Problem("pdfleet_cluster.instances", f"profile {c.profile} has no {needed} instance",
                                   f"add a {needed} instance, or use profile mono-tp8"))
        if "mono" in roles:
            out.append(Problem("pdfleet_cluster.instances", f"profile {c.profile} has a mono instance",
                               "use role prefill or decode, or profile mono-tp8"))
    else:
        if any(r != "mono" for r in roles):
            out.append(Problem("pdfleet_cluster.instances", "profile mono-tp8 has prefill/decode instances",
                               "use role mono for every instance, or a pd-* profile"))
    for role, policy in (("prefill", c.router.prefill_policy), ("decode", c.router.decode_policy)):
        count = roles.count(role)
        if policy == "power_of_two" and c.profile in PD_PROFILES and count < 2:
            out.append(Problem(f"pdfleet_cluster.router.{role}_policy", f"power_of_two needs at least 2 {role} "
                               f"workers, the plan has {count}", "use round_robin or cache_aware",
                               host=c.router.host))
    hosts_by_role = {r: {i.host for i in c.instances if i.role == r} for r in ("prefill", "decode")}
    if c.profile == "pd-4p4d":
        out += _check_4p4d_hosts(c)
    if c.profile == "pd-multinode" and hosts_by_role["prefill"] & hosts_by_role["decode"]:
        shared = ", ".join(sorted(hosts_by_role["prefill"] & hosts_by_role["decode"]))
        out.append(Problem("pdfleet_cluster.profile", f"pd-multinode but {shared} runs prefill and decode",
                           "move decode to its own host(s), or use profile pd-4p4d"))
    return out


def _check_4p4d_hosts(c: ClusterSpec) -> list[Problem]:
    """pd-4p4d is a fleet of self-contained hosts: each worker host runs its own prefill and decode, with
    the host's GPUs split evenly between them (4+4 on an 8-GPU host). One such host is the classic shape;
    several behind one router are a fleet, in which the router may pair any decode with any prefill (KV then
    crosses hosts, which the per-host split does not forbid). The router may sit on a worker host or on its
    own GPU-less host (an inventory host outside pdfleet_cluster.hosts)."""
    out: list[Problem] = []
    gpus: dict[str, dict[str, int]] = {}
    for inst in c.instances:
        if inst.role in ("prefill", "decode"):
            per_role = gpus.setdefault(inst.host, {"prefill": 0, "decode": 0})
            per_role[inst.role] += len(inst.gpus)
    for host, per_role in sorted(gpus.items()):
        missing = [r for r in ("prefill", "decode") if per_role[r] == 0]
        if missing:
            has = "decode" if missing == ["prefill"] else "prefill"
            out.append(Problem("pdfleet_cluster.profile", f"pd-4p4d puts prefill and decode on every worker "
                               f"host, but {host} runs only {has}",
                               f"add a {missing[0]} instance on {host}, or use profile pd-multinode", host=host))
        elif per_role["prefill"] != per_role["decode"]:
            out.append(Problem("pdfleet_cluster.profile", f"pd-4p4d splits each host's GPUs evenly, but {host} "
                               f"gives prefill {per_role['prefill']} and decode {per_role['decode']}",
                               f"give prefill and decode on {host} the same number of GPUs (4+4 on 8), or use "
                               "profile pd-multinode", host=host))
    return out


def _check_versions(c: ClusterSpec, supported_patches: Mapping[str, str]) -> list[Problem]:
    out: list[Problem] = []
    s = c.sglang
    supported = ", ".join(sorted(supported_patches)) or "(none)"
    if s.version not in supported_patches:
        out.append(Problem("pdfleet_cluster.sglang.version", f"SGLang {s.version} has no patch entry",
                           f"pin a supported version: {supported}"))
    elif supported_patches[s.version] != s.patch:
        out.append(Problem("pdfleet_cluster.sglang.patch", f"patch {s.patch!r} is not the patch for SGLang "
                           f"{s.version}", f"set it to {supported_patches[s.version]!r}"))
    m = c.model
    if m.source == "standin" and s.launcher != "sim":
        out.append(Problem("pdfleet_cluster.model.source", "standin (a tokenizer, no weights) is for simulated "
                           "hosts only", "use hub or mirror, or set sglang.launcher: sim"))
    if m.source == "mirror" and not m.mirror_path:
        out.append(Problem("pdfleet_cluster.model.mirror_path", "source mirror needs a mirror directory",
                           "set mirror_path to the model's directory on the control machine"))
    out += _check_absolute(c)
    if s.log_level not in SUPPORTED_LOG_LEVELS:
        out.append(Problem("pdfleet_cluster.sglang.log_level", f"{s.log_level!r} is not a log level",
                           f"use one of: {', '.join(SUPPORTED_LOG_LEVELS)}"))
    out += _check_cuda(c)
    return out


def _last_value(args: list[str], flag: str) -> str | None:
    """The value argparse would keep for ``flag`` (its last ``--flag V`` or ``--flag=V``)."""
    found = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(flag + "="):
            found = a.split("=", 1)[1]
    return found


def _check_hardware_limits(c: ClusterSpec) -> list[Problem]:
    """A server argument above what the pin allows on a host's GPUs (the manifest's ``hardware.<cc>.limits``)."""
    facts = hardware_facts(c.sglang.version)
    out: list[Problem] = []
    for idx, inst in enumerate(c.instances):
        hw = facts.get(c.hosts[inst.host].compute_capability) if inst.host in c.hosts else None
        for lim in hw.limits if hw else ():
            raw = _last_value(c.model.server_args + inst.extra_args, lim.flag)
            if inst.role not in lim.roles or raw is None or not re.fullmatch(r"-?\d+", raw):
                continue
            if int(raw) > lim.max or int(raw) < 1:  # SGLang reads 0 and -1 alike: no chunking
                in_extra = _last_value(inst.extra_args, lim.flag) is not None
                variable = (f"pdfleet_cluster.instances[{idx}].extra_args" if in_extra
                            else "pdfleet_cluster.model.server_args")
                out.append(Problem(
                    variable, f"{lim.flag} {raw} on {inst.name}: SGLang {c.sglang.version} on compute capability "
                    f"{hw.compute_capability} sends an extend batch above {lim.max} tokens to a kernel these GPUs "
                    f"lack ({lim.file}; see the hardware section of its patch manifest)",
                    f"set {lim.flag} between 1 and {lim.max} or leave it out (the manifest says why SGLang's "
                    "default is below it), or pin an SGLang version that guards it", host=inst.host))
    return out


def _check_absolute(c: ClusterSpec) -> list[Problem]:
    """Paths in the model section, the service venv and directories must be absolute: a relative one resolves against
    whatever directory a unit, Ansible or the control machine happens to run in."""
    out: list[Problem] = []
    for variable, value, fix in (
        ("pdfleet_cluster.model.path", c.model.path, "the weights' directory on every worker host"),
        ("pdfleet_cluster.model.mirror_path", c.model.mirror_path, "the model's directory on the control machine"),
        ("pdfleet_cluster.sglang.venv", c.sglang.venv, "the service venv on every host, e.g. /opt/pdfleet/venv"),
        ("pdfleet_cluster.sglang.router_venv", c.sglang.router_venv,
         "the router's venv on the router host, e.g. /opt/pdfleet/gateway"),
        ("pdfleet_cluster.service.config_dir", c.service.config_dir, "the units' configuration, e.g. /etc/pdfleet"),
        ("pdfleet_cluster.service.state_dir", c.service.state_dir, "the units' state, e.g. /var/lib/pdfleet"),
    ):
        if value and not value.startswith("/"):
            out.append(Problem(variable, f"{value!r} is a relative path", f"write it as an absolute path: {fix}"))
    return out


def _check_cuda(c: ClusterSpec) -> list[Problem]:
    out: list[Problem] = []
    cu = c.cuda
    try:
        floor, version, driver = (version_tuple(cu.floor), version_tuple(cu.version),
                                  version_tuple(cu.driver_version))
    except ValueError as exc:
        return [Problem("pdfleet_cluster.cuda", str(exc), "write versions as dotted numbers, e.g. 12.8")]
    if floor < version_tuple(CUDA_FLOOR):
        out.append(Problem("pdfleet_cluster.cuda.floor", f"CUDA floor {cu.floor} is below {CUDA_FLOOR}, the first "
                           "toolkit with Blackwell (sm_120) targets", f"set floor to {CUDA_FLOOR} or higher"))
    if version < floor:
        out.append(Problem("pdfleet_cluster.cuda.version", f"CUDA {cu.version} is below the floor {cu.floor}",
                           f"pin CUDA {cu.floor} or newer"))
    needed = max((d for v, d in CUDA_DRIVER_FLOORS.items() if version_tuple(v) <= version), default=None)
    if needed is not None and driver < needed:
        out.append(Problem("pdfleet_cluster.cuda.driver_version", f"driver {cu.driver_version} is too old "
                           f"for CUDA {cu.version}", f"pin a driver >= {'.'.join(map(str, needed))}"))
    if driver[0] != cu.driver_branch:
        out.append(Problem("pdfleet_cluster.cuda.driver_version", f"driver {cu.driver_version} is not on "
                           f"branch {cu.driver_branch}", "make driver_branch the driver's major version"))
    return out


def _check_ucx_tls(c: ClusterSpec) -> list[Problem]:
    """Every word of UCX_TLS is one of UCX's transports or aliases (pdfleet.ucx): UCX ignores a word it does not
    know, and the KV transfers may then silently run over another transport."""
    out: list[Problem] = []
    bad = unknown_words(c.nixl.ucx_tls)
    if bad:
        words = ", ".join(repr(w) for w in bad)
        what = "is not a UCX transport or alias" if len(bad) == 1 else "are not UCX transports or aliases"
        out.append(Problem("pdfleet_cluster.nixl.ucx_tls", f"{c.nixl.ucx_tls!r}: {words} {what}",
                           f"use UCX's names: {valid_names()}"))
    if misplaced_words(c.nixl.ucx_tls):
        out.append(Problem("pdfleet_cluster.nixl.ucx_tls", f"{c.nixl.ucx_tls!r}: UCX reads 'all' only on its own",
                           "write all alone (every transport), or list the transports without it"))
    return out


def _required_transports(c: ClusterSpec, roles: set[str]) -> list[str]:
    """Transports `ucx_info -d` must list on a host whose instances have `roles`: the concrete UCX_TLS words (no
    aliases, no exclusions), plus cuda_ipc where a prefill and a decode share the host (the KV cache moves GPU to
    GPU over CUDA IPC)."""
    if not roles & {"prefill", "decode"}:
        return []
    out = concrete_transports(c.nixl.ucx_tls)
    if roles >= {"prefill", "decode"} and "cuda_ipc" not in out:
        out.append("cuda_ipc")
    return out


def hardware_facts(version: str) -> dict[str, patches.HardwareFacts]:
    """The pin's facts per compute capability, from its patch manifest (none for a version without one)."""
    try:
        return patches.load_manifest(version).hardware or {}
    except UnsupportedVersionError:
        return {}


def _applied_facts(c: ClusterSpec, facts: Mapping[str, patches.HardwareFacts]) -> list[dict[str, object]]:
    """Each fact that reaches at least one worker unit, with the units, the wheel file and the condition."""
    out: list[dict[str, object]] = []
    manifest = package_relative(PATCH_DIR / c.sglang.version / patches.MANIFEST_FILE)
    for cc, hw in sorted(facts.items()):
        insts = [i for i in c.instances if c.hosts[i.host].compute_capability == cc]
        entries: list[tuple[str, str, patches.EnvFact | patches.FlagFact | patches.LimitFact]] = [
            *(("env", f"{f.name}={f.value}", f) for f in hw.env),
            *(("flag", " ".join(f.args), f) for f in hw.flags),
            *(("limit", f"{f.flag} <= {f.max}", f) for f in hw.limits)]
        for kind, setting, f in entries:
            units = [f"pdfleet-{i.name}" for i in insts if i.role in f.roles]
            if units:
                out.append({"compute_capability": cc, "kind": kind, "setting": setting, "roles": list(f.roles),
                            "units": units, "file": f.file, "condition": f.condition,
                            "manifest": manifest})
    return out


def _plan(c: ClusterSpec, inventory_hosts: Mapping[str, str]) -> Plan:
    hosts: dict[str, list[Unit]] = {name: [] for name in inventory_hosts}
    facts = hardware_facts(c.sglang.version)
    roles: dict[str, set[str]] = {}  # host -> the roles of its instances (one pass, not one per instance)
    for inst in c.instances:
        roles.setdefault(inst.host, set()).add(inst.role)
    workers = [_worker_unit(c, inst, inventory_hosts[inst.host], facts.get(c.hosts[inst.host].compute_capability),
                            roles[inst.host])
               for inst in c.instances]
    for unit in workers:
        hosts[unit.host].append(unit)
    router = _router_unit(c, inventory_hosts[c.router.host], workers)
    hosts[router.host].append(router)
    return Plan(
        profile=c.profile,
        model=asdict(c.model),
        sglang=asdict(c.sglang),
        cuda=asdict(c.cuda),
        service=asdict(c.service),
        router_url=router.url,
        hosts={h: units for h, units in hosts.items() if units},
        host_specs={name: asdict(spec) for name, spec in c.hosts.items()},
        hardware_facts=_applied_facts(c, facts),
        router=asdict(c.router),
        firewall=asdict(c.firewall),
    )


def _worker_unit(c: ClusterSpec, inst: InstanceSpec, address: str, hw: patches.HardwareFacts | None,
                 host_roles: set[str]) -> Unit:
    module = "pdfleet_sim.worker" if c.sglang.launcher == "sim" else "sglang.launch_server"
    argv = [f"{c.sglang.venv}/bin/python", "-m", module,
            "--model-path", c.model.path,
            "--served-model-name", c.model.served_name or c.model.name,
            "--host", address, "--port", str(inst.port), "--nccl-port", str(inst.nccl_port),
            "--tp", str(inst.tp), "--dp", str(inst.dp), "--base-gpu-id", "0",
            "--mem-fraction-static", f"{inst.mem_fraction_static:g}",
            "--enable-metrics", "--log-level", c.sglang.log_level]
    env = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in inst.gpus),
           "HF_HOME": f"{c.service.state_dir}/hf", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    if hw is not None:  # what the pin needs on this host's GPUs (before nixl.extra_env, which may override)
        env |= hw.env_for(inst.role)
        argv += hw.args_for(inst.role)
    if inst.role in ("prefill", "decode"):
        argv += ["--disaggregation-mode", inst.role, "--disaggregation-transfer-backend", "nixl"]
        if inst.bootstrap_port is not None:
            argv += ["--disaggregation-bootstrap-port", str(inst.bootstrap_port)]
        env |= {"SGLANG_DISAGGREGATION_NIXL_BACKEND": c.nixl.backend,
                "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": str(c.nixl.bootstrap_timeout_s),
                "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": str(c.nixl.waiting_timeout_s),
                "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": f"{c.nixl.heartbeat_interval_s:g}",
                "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": str(c.nixl.heartbeat_max_failures),
                "UCX_TLS": c.nixl.ucx_tls}
        if c.nixl.ucx_net_devices:
            env["UCX_NET_DEVICES"] = c.nixl.ucx_net_devices
        if c.nixl.ucx_tcp_port_range:  # UCX's TCP listening ports, which the host firewall opens to peers only
            env[firewall.UCX_PORT_RANGE_ENV] = c.nixl.ucx_tcp_port_range
        env |= c.nixl.extra_env
    argv += c.model.server_args + inst.extra_args
    role_word = {"prefill": "prefill", "decode": "decode", "mono": "monolithic"}[inst.role]
    gpus = ",".join(str(g) for g in inst.gpus)
    return Unit(
        name=f"pdfleet-{inst.name}", kind="worker", role=inst.role, instance=inst.name, host=inst.host,
        address=address, description=f"pdfleet SGLang {role_word} server {inst.name} (TP{inst.tp}, GPUs {gpus})",
        exec_start=argv, environment=env, gpus=list(inst.gpus), cuda_visible_devices=gpus,
        ports=_instance_ports(inst), timeout_stop_s=c.router.drain_timeout_s + 60,
        url=f"http://{address}:{inst.port}", tp=inst.tp, dp=inst.dp,
        start_hold_down_s=prefill_hold_down(c) if inst.role == "prefill" else 0,
        ucx_tls=[w.strip() for w in c.nixl.ucx_tls.split(",") if w.strip()] if inst.role != "mono" else [],
        ucx_net_devices=[d.strip() for d in c.nixl.ucx_net_devices.split(",") if d.strip()]
        if inst.role != "mono" else [],
        required_transports=_required_transports(c, host_roles),
    )


# A key (the gateway's API key) reaches its process from that unit's own secrets file
# (0600, root; pdfleet_units renders it), never on its command line: systemd would expand ${NAME} into argv, which
# `ps` shows every user. The venv's Python runs this instead: it takes the key out of the environment, appends it
# to the program's own sys.argv (in the process only) and runs the program (a module name, or the path of a
# console script). Without the key it refuses to start an open service.
def key_shim(env_name: str, flag: str, setting: str) -> str:
    """The ``python -c`` code that runs a program with ``flag <key>`` taken from ``$env_name``."""
    return (
        f"import os,runpy,sys;k=os.environ.pop('{env_name}','').strip();"
        f"k or sys.exit('pdfleet: {setting} is on but {env_name} is not set in the secrets file of this unit. Fix: "
        f"set pdfleet_units_secrets.{env_name} (Vault) and converge');"
        f"t=sys.argv[1];sys.argv=[t]+sys.argv[2:]+['{flag}',k];"
        "runpy.run_path(t,run_name='__main__') if t.startswith('/') else "
        "runpy.run_module(t,run_name='__main__',alter_sys=True)"
    )


ROUTER_KEY_ENV = "PDFLEET_ROUTER_API_KEY"
ROUTER_KEY_SHIM = key_shim(ROUTER_KEY_ENV, "--api-key", "router.api_key")


def with_key_shim(argv: list[str], python: str, shim: str) -> list[str]:
    """``argv`` (``python -m module …`` or ``/path/console-script …``) run through ``shim``."""
    return [python, "-c", shim, *(argv[2:] if argv[1] == "-m" else argv)]


def without_key_shim(argv: list[str]) -> list[str]:
    """The command line a unit runs once its key shim has handed over (the inverse of with_key_shim; the key's own
    flag is added in the process and is not part of it)."""
    if len(argv) > 3 and argv[1] == "-c":
        return argv[3:] if argv[3].startswith("/") else [argv[0], "-m", *argv[3:]]
    return list(argv)


def _router_unit(c: ClusterSpec, address: str, workers: list[Unit]) -> Unit:
    r = c.router
    python = f"{c.sglang.router_venv}/bin/python"
    argv = [python, "-m", router_module(c.sglang.router_package)]
    if r.api_key:  # the shim adds the key from the environment (ROUTER_KEY_SHIM): its target, then the arguments
        argv = with_key_shim(argv, python, ROUTER_KEY_SHIM)
    smg = c.sglang.router_package == "smg"
    # smg: no worker on the command line (it could not label one): the registrar adds each with its version's
    # pairing protocol (members_argv); sglang-router 0.3.2 has no labels and takes them here
    listed = [] if smg else workers
    if c.profile in PD_PROFILES:
        argv += ["--pd-disaggregation"]
        for w in listed:
            if w.role == "prefill":
                argv += ["--prefill", w.url, str(w.ports["bootstrap_port"])]
        for w in listed:
            if w.role == "decode":
                argv += ["--decode", w.url]
        argv += ["--prefill-policy", r.prefill_policy, "--decode-policy", r.decode_policy]
    else:
        argv += ["--worker-urls", *[w.url for w in listed], "--policy", r.policy]
    argv += ["--host", address, "--port", str(r.port),
             "--prometheus-host", address, "--prometheus-port", str(r.metrics_port),
             "--health-check-interval-secs", str(r.health_check_interval_secs)]
    if smg:  # the gateway's own resilience settings, from the plan (RouterSpec; README "The gateway")
        argv += ["--health-failure-threshold", str(r.health_failure_threshold),
                 "--health-success-threshold", str(r.health_success_threshold),
                 "--health-check-timeout-secs", str(r.health_check_timeout_secs),
                 "--no-remove-unhealthy-workers",
                 "--retry-max-retries", str(r.retry_max_attempts),
                 *(["--cb-failure-threshold", str(r.cb_failure_threshold),
                    "--cb-timeout-duration-secs", str(r.cb_timeout_duration_secs)] if r.circuit_breaker
                   else ["--disable-circuit-breaker"]),
                 "--shutdown-grace-period-secs", str(r.shutdown_grace_s),
                 "--worker-startup-check-interval", str(r.worker_startup_check_interval_secs),
                 "--log-level", "info"]
    argv += r.extra_args
    return Unit(
        name=ROUTER_UNIT, kind="router", role="router", instance="router", host=r.host, address=address,
        description=f"pdfleet SGLang router ({c.profile}, workers: {len(workers)})",
        exec_start=argv, environment={"PYTHONUNBUFFERED": "1", "RUST_LOG": "info", "NO_COLOR": "1"},
        ports={"port": r.port, "metrics_port": r.metrics_port}, after=[w.name for w in workers if w.host == r.host],
        timeout_stop_s=r.shutdown_grace_s + 15 if smg else 30, url=f"http://{address}:{r.port}",
        secrets=[ROUTER_KEY_ENV] if r.api_key else [],
        exec_start_post=members_argv(c, f"http://{address}:{r.port}", workers) if smg else [],
    )


def members_argv(c: ClusterSpec, gateway: str, workers: list[Unit]) -> list[str]:
    """The gateway's registrar (pdfleet.fleet.members, from the pdfleet wheel in the gateway's venv), detached from
    the unit's ExecStartPost: every planned worker registered under its own SGLang version's pairing protocol, so a
    gateway that restarts never pairs two versions (README, "The gateway")."""
    argv = [f"{c.sglang.router_venv}/bin/python", "-m", "pdfleet.fleet.members", "--detach", "--gateway", gateway,
            "--lease-dir", str(LEASE_DIR)]
    if c.router.api_key:
        argv += ["--key-env", ROUTER_KEY_ENV]
    for w in workers:
        argv += ["--member", w.host, w.role, w.url, str(w.ports.get("bootstrap_port", "-"))]
    return argv
