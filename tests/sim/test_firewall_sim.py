"""The host firewall and the gateway key on the converged one-host sim, tried from a stranger: a network namespace
this test attaches to the sim's bridge with an address no plan names (not a peer, not the gateway, not an
operator). From there:

- the worker ports, the prefill's bootstrap port, the router's metrics port and Prometheus are refused, while the
  same ports answer the control machine (the inventory's operator): the firewall, not a closed port, refuses them;
- a UCX port (a listener this test opens on node1 inside nixl.ucx_tcp_port_range) is refused to the stranger and
  to the operator (only the planned peers, here the host itself, may reach it) and reached from node1 itself;
- the gateway's port is open (its clients: anyone), and POST /workers without the key is 401: nobody without the
  key adds a worker of theirs.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pdfleet.inventory_plan import plan_inventory
from simcluster import SITE, ScratchCluster

pytestmark = [pytest.mark.sim]

UCX_PORT = 40500  # inside the sim's nixl.ucx_tcp_port_range (40000-40999, the default)
LISTENER = ("import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
            f"s.bind(('0.0.0.0',{UCX_PORT}));s.listen(8);time.sleep(120)")
PROBE = """
import json, socket, sys
out = {}
for host, port in json.loads(sys.argv[1]):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); out[f"{host}:{port}"] = "open"
    except ConnectionRefusedError:
        out[f"{host}:{port}"] = "refused"
    except OSError as e:
        out[f"{host}:{port}"] = f"error {e}"
    finally:
        s.close()
print(json.dumps(out))
"""


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def stranger(converged: ScratchCluster) -> Iterator[tuple[str, str]]:
    """(netns name, address): a namespace on the cluster's bridge at the subnet's .250."""
    sim = yaml.safe_load((converged.inventory / "group_vars" / "all" / "sim.yml").read_text())["pdfleet_sim"]
    net = ipaddress.ip_network(sim["cidr"])
    address = str(net.network_address + 250)
    name, host_end = f"pdfst{os.getpid() % 100000}", f"pdfsv{os.getpid() % 100000}"
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", name)
        _run("ip", "link", "set", host_end, "master", sim["bridge"], "up")
        _run("ip", "-n", name, "addr", "add", f"{address}/{net.prefixlen}", "dev", "eth0")
        _run("ip", "-n", name, "link", "set", "eth0", "up")
        _run("ip", "-n", name, "link", "set", "lo", "up")
        yield name, address
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _probe(targets: list[tuple[str, int]], netns: str | None = None) -> dict[str, str]:
    argv = [sys.executable, "-c", PROBE, json.dumps(targets)]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


def test_a_stranger_on_the_network_is_refused_everything_but_the_keyed_gateway(
        converged: ScratchCluster, stranger: tuple[str, str]) -> None:
    netns, address = stranger
    plan = plan_inventory(converged.inventory)
    units = {u.role: u for u in plan.units()}
    node1 = converged.address
    closed = [(node1, units["prefill"].ports["port"]), (node1, units["decode"].ports["port"]),
              (node1, units["prefill"].ports["bootstrap_port"]), (node1, units["router"].ports["metrics_port"]),
              (node1, 9090)]
    gateway = (node1, units["router"].ports["port"])
    listener = subprocess.Popen(["ssh", "-F", str(converged.state_dir / "ssh_config"), "node1",
                                 f"timeout 60 python3 -c \"{LISTENER}\""], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        local = ""
        for _ in range(30):
            local = converged.ssh(f"python3 -c \"import socket;socket.create_connection(('{node1}',{UCX_PORT}),3);"
                                  "print('open')\" 2>&1 | tail -1").stdout.strip()
            if local == "open":
                break
            time.sleep(0.5)
        seen_by_stranger = _probe([*closed, (node1, UCX_PORT), gateway], netns)
        seen_by_operator = _probe([*closed, (node1, UCX_PORT), gateway])
    finally:
        listener.kill()
    key = lambda t: f"{t[0]}:{t[1]}"  # noqa: E731
    assert local == "open", f"node1 could not reach its own UCX listener: {local}"
    assert {key(t): seen_by_operator[key(t)] for t in closed} == {key(t): "open" for t in closed}, seen_by_operator
    assert {key(t): seen_by_stranger[key(t)] for t in closed} == {key(t): "refused" for t in closed}, (
        f"from {address}: {seen_by_stranger}")
    assert seen_by_stranger[key((node1, UCX_PORT))] == "refused" == seen_by_operator[key((node1, UCX_PORT))]
    assert seen_by_stranger[key(gateway)] == "open" == seen_by_operator[key(gateway)]
    post = ("import urllib.request,urllib.error\ntry:\n urllib.request.urlopen(urllib.request.Request("
            f"'{converged.router_url}/workers',data=b'{{\"url\": \"http://{address}:30000\"}}',"
            "headers={'Content-Type':'application/json'}),timeout=10);print(200)\n"
            "except urllib.error.HTTPError as e:\n print(e.code)")
    added = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", post], capture_output=True,
                           text=True, timeout=60, check=True).stdout.strip()
    assert added == "401", f"POST /workers without the key from {address}: {added}"


def test_the_probe_tells_a_refusal_from_an_open_port(tmp_path: Path) -> None:
    """The probe above is not blind: a listening loopback port reads open, a closed one refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        found = _probe([("127.0.0.1", port), ("127.0.0.1", 1)])
    assert found == {f"127.0.0.1:{port}": "open", "127.0.0.1:1": "refused"}


def _table(c: ScratchCluster) -> subprocess.CompletedProcess[str]:
    return c.ssh("nft list table inet pdfleet")


@pytest.mark.mutates
def test_the_firewall_outlives_a_boot_reload_and_goes_with_enabled_false(
        converged: ScratchCluster, stranger: tuple[str, str]) -> None:
    """What boot does (systemd-sysctl.service applies /etc/sysctl.d: UCX's range reserved again, and not without
    our file; nftables.service loads /etc/nftables.conf: its `flush ruleset`, then our include line) leaves the range
    reserved, the pdfleet table loaded and the stranger refused; `firewall.enabled: false` converges to no table, no
    ruleset file and no include line (the worker port open to the stranger) and keeps UCX's ports reserved from
    the kernel's ephemeral allocation; enabled again, it is all back."""
    netns, _ = stranger
    plan = plan_inventory(converged.inventory)
    worker = (converged.address, next(u for u in plan.units() if u.role == "decode").ports["port"])
    where = f"{worker[0]}:{worker[1]}"
    files = "test -e /etc/nftables.d/pdfleet.nft && echo file; grep -c pdfleet.nft /etc/nftables.conf || true"
    # The UCX range reserved from the kernel's ephemeral ports, whatever the firewall (pdfleet.firewall.reserved_ports)
    reserved = ("cat /proc/sys/net/ipv4/ip_local_reserved_ports; "
                "grep -h '^net.ipv4.ip_local_reserved_ports' /etc/sysctl.d/90-pdfleet-reserved-ports.conf")
    want_reserved = ["40000-40999", "net.ipv4.ip_local_reserved_ports", "=", "40000-40999"]
    assert converged.ssh(reserved).stdout.split() == want_reserved
    # what boot does with the file: systemd-sysctl.service applies /etc/sysctl.d to the fresh kernel state (here the
    # live value cleared first); with the file moved aside the same boot step leaves the range unreserved
    live = "cat /proc/sys/net/ipv4/ip_local_reserved_ports"
    boot = f"echo > {live[4:]} && systemctl restart systemd-sysctl.service && {live}"
    conf = "/etc/sysctl.d/90-pdfleet-reserved-ports.conf"
    assert converged.ssh(boot).stdout.split() == want_reserved[:1], "boot's sysctl step did not reserve the range"
    without = converged.ssh(f"mv {conf} /root/held.conf && {boot}; mv /root/held.conf {conf}").stdout.split()
    assert without == [], f"without the file the boot step should leave nothing reserved: {without}"
    assert converged.ssh(boot).stdout.split() == want_reserved[:1]
    restart = converged.ssh("systemctl restart nftables.service")
    assert restart.returncode == 0, restart.stderr
    assert _table(converged).returncode == 0, "the boot configuration did not load the pdfleet table"
    assert _probe([worker], netns)[where] == "refused"
    try:
        with converged.model_changed("firewall", enabled=False):
            converged.playbook(SITE, "--tags", "deploy")
            gone = _table(converged)
            left = converged.ssh(files).stdout.split()
            open_now = _probe([worker], netns)[where]
            reserved_off = converged.ssh(reserved).stdout.split()
    finally:
        converged.playbook(SITE, "--tags", "deploy")
    assert gone.returncode != 0, f"enabled: false left the table loaded:\n{gone.stdout}"
    assert left == ["0"], f"enabled: false left the ruleset file or its include line: {left}"
    assert open_now == "open", f"with the firewall off the stranger should reach {where}: {open_now}"
    assert reserved_off == want_reserved, "the firewall off must leave UCX's ports reserved"
    assert _table(converged).returncode == 0, "enabled again, the table is not back"
    assert converged.ssh(files).stdout.split() == ["file", "1"]
    assert _probe([worker], netns)[where] == "refused"
