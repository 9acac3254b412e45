"""The host firewall: from the plan, who may connect to each pdfleet port of a host, as an nftables ruleset.

One job: per host with planned units, the allow-list (each pdfleet port and the source networks allowed to it)
and its ruleset text. The ruleset is a table of its own (``table inet pdfleet``) whose one input chain (policy
accept) accepts the allowed sources of each listed port and refuses the rest of that port's connections (a TCP
reset: the client is told at once, as by a closed port, instead of waiting for a time-out): every other
port and service of the host (SSH among them) is left to the host's own rules, loopback is always allowed, and
replies to connections the host itself opened pass (an ephemeral local port may fall inside a listed range).

Who may connect where:
- a worker's HTTP port: the gateway (router) host, which also runs the watchdog and Prometheus; the operators;
  the host itself;
- a prefill's bootstrap port: every host with a decode (the router may pair any decode with any prefill), the
  gateway, the operators, the host itself;
- a worker's NCCL port: the hosts of its instance (an instance lives on one host: the host itself);
- UCX's TCP listening ports (NIXL's KV transfers; held to ``nixl.ucx_tcp_port_range`` through UCX_TCP_PORT_RANGE in
  the workers' environment): the planned peers only (a prefill host's decode hosts and a decode host's prefill
  hosts) and the host itself;
- the gateway's serving port: ``firewall.clients``, the operators, the host itself;
- the router's metrics port, Prometheus and the watchdog's metrics (the reserved ports of the router host):
  ``firewall.scrapers``, the operators, the host itself.
Not closed: the TCP ports SGLang's workers bind for their ZMQ sockets (a prefill rank's, to which the decodes send
their transfer requests): SGLang lets the kernel pick them from its ephemeral range and has no setting for a range,
so they are left as the host's own rules have it. The ephemeral range (32768-60999 by default) holds the default
UCX range, so each prefill/decode host also reserves the UCX range from the kernel's ephemeral allocation
(``net.ipv4.ip_local_reserved_ports``, also for IPv6; ``reserved_ports``, whatever the firewall's ``enabled``): a
port-0 bind (ZMQ's, any client's) never lands there, and UCX, which binds its ports by number, keeps all of them.

The planner calls ``check_firewall`` with its other rules; ``pdfleet.plandoc`` puts each host's allow-list and
ruleset into the plan document (``host_firewalls``), which the pdfleet_firewall role writes.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdfleet.clusterspec import ClusterSpec, short
from pdfleet.errors import Problem
from pdfleet.versions import RESERVED_PORTS

if TYPE_CHECKING:  # the planner calls check_firewall: no import cycle at run time
    from pdfleet.planner import Plan, Unit

TABLE = "pdfleet"
UCX_PORT_RANGE_ENV = "UCX_TCP_PORT_RANGE"
_RANGE = re.compile(r"([0-9]{1,5})-([0-9]{1,5})")
_FIREWALL = "pdfleet_cluster.firewall"


@dataclass(frozen=True)
class Allow:
    """One pdfleet port (or port range) of a host and the source networks allowed to it."""

    ports: str  # "8998" or "40000-40999"
    what: str  # what listens there, e.g. "pdfleet-prefill0 bootstrap_port"
    sources: tuple[str, ...]  # networks, collapsed and sorted: IPv4 first, then IPv6

    @property
    def first_port(self) -> int:
        return int(self.ports.split("-")[0])


def port_range(text: str) -> tuple[int, int] | None:
    """(first, last) of a "first-last" range of unprivileged ports; None for anything else."""
    m = _RANGE.fullmatch(text)
    if not m:
        return None
    first, last = int(m.group(1)), int(m.group(2))
    return (first, last) if 1024 <= first <= last <= 65535 else None


def check_firewall(c: ClusterSpec, inventory_hosts: Mapping[str, str]) -> list[Problem]:
    """The firewall's rules: every CIDR parses, the UCX port range is a range clear of the planned ports, and (with
    the firewall on) every planned host's address is an IP address (a ruleset holds addresses, not names)."""
    out: list[Problem] = []
    fw = c.firewall
    for name, cidrs in (("operators", fw.operators), ("clients", fw.clients), ("scrapers", fw.scrapers)):
        for i, cidr in enumerate(cidrs):
            problem = _cidr_problem(cidr)
            if problem:
                out.append(Problem(f"{_FIREWALL}.{name}[{i}]", problem, "write an IPv4 or IPv6 address or network, "
                                   "e.g. 192.0.2.10/32 or 2001:db8::/64"))
    out += _check_ucx_range(c)
    if fw.enabled:
        planned = {c.router.host, *(i.host for i in c.instances)}
        for host in sorted(planned & set(inventory_hosts)):
            if not _is_ip(inventory_hosts[host]):
                out.append(Problem(f"hostvars[{host}].ansible_host", f"{short(inventory_hosts[host])} is not an IP "
                                   f"address; the host firewall ({_FIREWALL}) allows its peers by address",
                                   "set ansible_host to the host's IP address, or set "
                                   f"{_FIREWALL}.enabled: false", host=host))
    return out


def _cidr_problem(cidr: str) -> str:
    try:
        ipaddress.ip_network(cidr, strict=True)
    except ValueError as exc:
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            return f"{short(cidr)} is not an IP address or network ({exc})"
        return f"{short(cidr)} has host bits set (the network is {net})"
    return ""


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _check_ucx_range(c: ClusterSpec) -> list[Problem]:
    path = "pdfleet_cluster.nixl.ucx_tcp_port_range"
    text = c.nixl.ucx_tcp_port_range
    if not text:
        return []
    span = port_range(text)
    if span is None:
        return [Problem(path, f"{short(text)} is not a range of unprivileged ports", "write first-last within "
                        "1024-65535 inside the hosts' net.ipv4.ip_local_port_range (e.g. 40000-40999), or \"\" to "
                        "let the kernel pick UCX's ports (the firewall then cannot close them)")]
    out: list[Problem] = []
    pd_hosts = {i.host for i in c.instances if i.role in ("prefill", "decode")}  # the hosts whose workers use UCX
    claims = [(c.router.host, "router", {"port": c.router.port, "metrics_port": c.router.metrics_port})]
    claims += [(i.host, i.name, {"port": i.port, "nccl_port": i.nccl_port, "bootstrap_port": i.bootstrap_port})
               for i in c.instances]
    for host, owner, ports in claims:
        for key, port in ports.items():
            if host in pd_hosts and port is not None and span[0] <= port <= span[1]:
                out.append(Problem(path, f"{text} holds port {port} ({owner}.{key} on {host}); UCX could take it",
                                   "move the range or the port apart", host=host))
    return out


def _networks(sources: Iterable[str]) -> tuple[str, ...]:
    """Addresses and networks as networks, overlaps merged (an nftables interval set refuses overlaps), sorted."""
    nets = [ipaddress.ip_network(s, strict=False) for s in sources]
    v4 = ipaddress.collapse_addresses(n for n in nets if n.version == 4)
    v6 = ipaddress.collapse_addresses(n for n in nets if n.version == 6)
    return tuple(str(n) for n in (*sorted(v4), *sorted(v6)))


def allow_lists(plan: Plan) -> dict[str, list[Allow]]:
    """Each host with planned units and its allow-list, sorted by port (empty for all with the firewall off)."""
    if not plan.firewall.get("enabled", True):
        return {}
    units = plan.units()
    operators = [str(s) for s in plan.firewall.get("operators", [])]
    clients = [str(s) for s in plan.firewall.get("clients", [])]
    scrapers = [str(s) for s in plan.firewall.get("scrapers", [])]
    gateway = [u.address for u in units if u.kind == "router"]
    by_role = {role: sorted({u.address for u in units if u.role == role}) for role in ("prefill", "decode")}
    out: dict[str, list[Allow]] = {}
    for host, host_units in sorted(plan.hosts.items()):
        me = [host_units[0].address]
        rules: list[Allow] = []
        for u in host_units:
            rules += _unit_rules(u, me, gateway, operators, clients, scrapers, by_role["decode"])
        if any(u.kind == "router" for u in host_units):
            rules += [Allow(str(port), what, _networks([*scrapers, *operators, *me]))
                      for port, what in sorted(RESERVED_PORTS.items())]
        rules += _ucx_rules(host_units, me, by_role)
        out[host] = sorted(rules, key=lambda a: (a.first_port, a.ports))
    return out


def _unit_rules(u: Unit, me: list[str], gateway: list[str], operators: list[str], clients: list[str],
                scrapers: list[str], decodes: list[str]) -> list[Allow]:
    if u.kind == "router":
        return [Allow(str(u.ports["port"]), f"{u.name} port (the gateway)", _networks([*clients, *operators, *me])),
                Allow(str(u.ports["metrics_port"]), f"{u.name} metrics_port", _networks([*scrapers, *operators, *me]))]
    rules = [Allow(str(u.ports["port"]), f"{u.name} port", _networks([*gateway, *operators, *me])),
             # An instance runs on one host: its NCCL/torch.distributed rendezvous is the host's own.
             Allow(str(u.ports["nccl_port"]), f"{u.name} nccl_port", _networks(me))]
    if "bootstrap_port" in u.ports:
        rules.append(Allow(str(u.ports["bootstrap_port"]), f"{u.name} bootstrap_port",
                           _networks([*decodes, *gateway, *operators, *me])))
    return rules


def _ucx_rules(host_units: list[Unit], me: list[str], by_role: Mapping[str, list[str]]) -> list[Allow]:
    """UCX's TCP listening range, open to the host's planned peers: a prefill host's decodes, a decode host's
    prefills (the workers' UCX_TCP_PORT_RANGE; none where it is unset or not a range)."""
    ranges = {u.environment.get(UCX_PORT_RANGE_ENV, "") for u in host_units if u.role in ("prefill", "decode")}
    roles = {u.role for u in host_units}
    peers = [*(by_role["decode"] if "prefill" in roles else []), *(by_role["prefill"] if "decode" in roles else [])]
    return [Allow(f"{span[0]}-{span[1]}", "UCX TCP (NIXL KV transfers)", _networks([*peers, *me]))
            for span in sorted(filter(None, (port_range(r) for r in ranges)))]


def render_nft(plan: Plan, host: str) -> str:
    """The host's nftables ruleset (byte-stable: the same plan gives the same bytes); "" when it has none (the
    firewall off, or no units on the host)."""
    return _render(host, allow_lists(plan).get(host, []))


def _render(host: str, rules: list[Allow]) -> str:
    if not rules:
        return ""
    lines = ["#!/usr/sbin/nft -f",
             f"# pdfleet host firewall of {host}, generated from the plan (pdfleet.firewall): do not edit.",
             "# Only the pdfleet ports below are filtered; every other port is left to the host's own rules.",
             # Declaring the table first makes the delete succeed on a host that has none: one atomic replace.
             f"table inet {TABLE}",
             f"delete table inet {TABLE}",
             f"table inet {TABLE} {{",
             "\tchain input {",
             "\t\ttype filter hook input priority filter - 10; policy accept;",
             '\t\tiif "lo" accept',
             "\t\tct direction reply accept"]
    for rule in rules:
        port = rule.ports
        lines.append(f"\t\t# {rule.what}")
        v4 = [s for s in rule.sources if ":" not in s]
        v6 = [s for s in rule.sources if ":" in s]
        if v4:
            lines.append(f"\t\ttcp dport {port} ip saddr {{ {', '.join(v4)} }} accept")
        if v6:
            lines.append(f"\t\ttcp dport {port} ip6 saddr {{ {', '.join(v6)} }} accept")
        lines.append(f"\t\ttcp dport {port} reject with tcp reset")
    lines += ["\t}", "}", ""]
    return "\n".join(lines)


def reserved_ports(plan: Plan, host: str) -> str:
    """The port ranges ``host`` keeps out of the kernel's ephemeral allocation: its prefill/decode workers' UCX range
    (``UCX_TCP_PORT_RANGE``), as the ``net.ipv4.ip_local_reserved_ports`` list ("first-last[,first-last]"); "" when
    none. Independent of the firewall's ``enabled``: the reservation keeps UCX's ports free, the firewall filters."""
    ranges = {u.environment.get(UCX_PORT_RANGE_ENV, "") for u in plan.hosts.get(host, [])
              if u.role in ("prefill", "decode")}
    spans = sorted(filter(None, (port_range(r) for r in ranges)))
    return ",".join(f"{a}-{b}" for a, b in spans)


def host_firewalls(plan: Plan) -> dict[str, dict[str, object]]:
    """For the plan document: each host with units, its allow-list, its ruleset ("" with the firewall off) and the
    ports it reserves from the kernel's ephemeral range (``reserved_ports``)."""
    lists = allow_lists(plan)
    return {host: {"enabled": host in lists,
                   "allow": [{"ports": a.ports, "what": a.what, "sources": list(a.sources)}
                             for a in lists.get(host, [])],
                   "ruleset": _render(host, lists.get(host, [])),
                   "reserved_ports": reserved_ports(plan, host)}
            for host in sorted(plan.hosts)}
