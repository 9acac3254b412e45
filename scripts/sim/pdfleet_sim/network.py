"""The sim bridge, this machine's address on it, and the nftables masquerade that lets the hosts reach
the package registries. Nothing here touches an address outside the bridge's subnet."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from .hosttypes import SimError, SimHost, SimNetwork
from .system import _load_hostprep, _save_hostprep, run

NFT_PREFIX = "pdfleet_sim_"
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def nft_table(bridge: str) -> str:
    return NFT_PREFIX + bridge.replace("-", "_")


def validate(network: SimNetwork, hosts: list[SimHost]) -> None:
    if not 1 <= len(network.bridge) <= 15 or not network.bridge.replace("-", "").replace("_", "").isalnum():
        raise SimError(f"bridge name {network.bridge!r} must be 1-15 letters, digits, '-' or '_'")
    try:
        net = ipaddress.ip_network(network.cidr, strict=True)
        gateway = ipaddress.ip_address(network.gateway)
    except ValueError as exc:
        raise SimError(f"sim network {network}: {exc}") from exc
    if not net.is_private or net.version != 4:
        raise SimError(f"sim network {network.cidr} must be a private IPv4 subnet (e.g. 10.77.0.0/24)")
    if gateway not in net:
        raise SimError(f"gateway {network.gateway} is not inside {network.cidr}")
    seen: dict[str, str] = {str(gateway): "the gateway"}
    for host in hosts:
        try:
            addr = ipaddress.ip_address(host.address)
        except ValueError as exc:
            raise SimError(f"sim host {host.name}: {exc}") from exc
        if addr not in net or addr in (net.network_address, net.broadcast_address):
            raise SimError(f"sim host {host.name}: {host.address} is not a host address in {network.cidr}")
        if host.address in seen:
            raise SimError(f"sim host {host.name}: {host.address} is already used by {seen[host.address]}")
        seen[host.address] = host.name


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def ensure(network: SimNetwork) -> None:
    """Create the bridge with the gateway address, enable forwarding and the masquerade (idempotent)."""
    prefix = ipaddress.ip_network(network.cidr).prefixlen
    if not _link_exists(network.bridge):
        run(["ip", "link", "add", "name", network.bridge, "type", "bridge"])
    elif not Path("/sys/class/net", network.bridge, "bridge").is_dir():
        raise SimError(f"network interface {network.bridge} exists and is not a bridge; choose another name")
    addrs = json.loads(run(["ip", "-j", "-4", "addr", "show", "dev", network.bridge]).stdout or "[]")
    have = {(a["local"], a["prefixlen"]) for link in addrs for a in link.get("addr_info", [])}
    if (network.gateway, prefix) not in have:
        run(["ip", "addr", "add", f"{network.gateway}/{prefix}", "dev", network.bridge])
    run(["ip", "link", "set", network.bridge, "up"])

    state = _load_hostprep()
    if "ip_forward_orig" not in state:
        state["ip_forward_orig"] = IP_FORWARD.read_text().strip()
        _save_hostprep(state)
    IP_FORWARD.write_text("1\n")

    table = nft_table(network.bridge)
    ruleset = f"""
table ip {table}
delete table ip {table}
table ip {table} {{
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        ip saddr {network.cidr} ip daddr != {network.cidr} masquerade
    }}
    chain forward {{
        type filter hook forward priority filter; policy accept;
        iifname "{network.bridge}" accept
        oifname "{network.bridge}" ct state established,related accept
    }}
}}
"""
    run(["nft", "-f", "-"], input_text=ruleset)


def remove(bridge: str) -> None:
    """Delete the nft table and the bridge; restore ip_forward once no sim network is left."""
    table = nft_table(bridge)
    if run(["nft", "list", "table", "ip", table], check=False).returncode == 0:
        run(["nft", "delete", "table", "ip", table])
    if _link_exists(bridge):
        run(["ip", "link", "delete", bridge])
    if not any_sim_tables():
        state = _load_hostprep()
        orig = state.pop("ip_forward_orig", None)
        if orig is not None:
            IP_FORWARD.write_text(f"{orig}\n")
            _save_hostprep(state)


def any_sim_tables() -> list[str]:
    out = run(["nft", "-j", "list", "tables"], check=False).stdout or "{}"
    tables = [item["table"]["name"] for item in json.loads(out).get("nftables", []) if "table" in item]
    return [t for t in tables if t.startswith(NFT_PREFIX)]


def table_exists(bridge: str) -> bool:
    return nft_table(bridge) in any_sim_tables()


def bridge_exists(bridge: str) -> bool:
    return _link_exists(bridge)
