"""The host firewall from the plan (pdfleet.firewall): who may reach each pdfleet port, for the shipped profiles
and the sim fleet; the nftables text is byte-stable and passes `nft -c`; bad CIDRs are refused naming the field;
`enabled: false` gives no rules; the pdfleet_firewall role's probe decides what differs; and, where root may make a
throwaway network namespace, a loaded ruleset refuses a non-peer and leaves other ports alone."""

from __future__ import annotations

import copy
import ipaddress
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_plugins.probes import load_probe
from pdfleet import firewall
from pdfleet.errors import PlanError
from pdfleet.inventory_plan import plan_inventory, supported_patches
from pdfleet.paths import REPO_ROOT
from pdfleet.plandoc import plan_document
from pdfleet.planner import Plan, build_plan
from plan_support import EXAMPLES

NOT_A_PEER = "203.0.113.99"  # on no inventory's network


def _allowed(rules: list[firewall.Allow], port: int, address: str) -> bool:
    """Whether `address` may connect to `port` (a port no rule lists is not the firewall's)."""
    for rule in rules:
        first, _, last = rule.ports.partition("-")
        if int(first) <= port <= int(last or first):
            return any(ipaddress.ip_address(address) in ipaddress.ip_network(s) for s in rule.sources)
    raise AssertionError(f"port {port} is not in the allow-list")


def _units(plan: Plan, host: str, role: str) -> list:
    return [u for u in plan.hosts[host] if u.role == role]


@pytest.fixture(scope="module")
def pd4() -> Plan:
    return plan_inventory(EXAMPLES / "pd-4p4d")


@pytest.fixture(scope="module")
def fleet() -> Plan:
    return plan_inventory(REPO_ROOT / "inventory" / "sim-fleet")


@pytest.fixture(scope="module")
def multinode() -> Plan:
    return plan_inventory(EXAMPLES / "pd-multinode")


def test_pd_4p4d_closes_every_pdfleet_port_to_a_stranger(pd4: Plan) -> None:
    (host,) = pd4.hosts
    rules = firewall.allow_lists(pd4)[host]
    me = pd4.hosts[host][0].address
    for unit in pd4.hosts[host]:
        for key, port in unit.ports.items():
            if key == "port" and unit.kind == "router":
                assert _allowed(rules, port, NOT_A_PEER)  # the gateway's clients: everyone by default
                continue
            assert not _allowed(rules, port, NOT_A_PEER), (unit.name, key)
            assert _allowed(rules, port, me), (unit.name, key)
    for port in (9090, 9470, 40000):  # Prometheus, the watchdog's metrics, UCX's TCP range
        assert not _allowed(rules, port, NOT_A_PEER)
        assert _allowed(rules, port, me)


def test_the_sim_fleet_opens_worker_bootstrap_and_ucx_ports_to_planned_peers_only(fleet: Plan) -> None:
    lists = firewall.allow_lists(fleet)
    router = next(u for u in fleet.units() if u.kind == "router")
    operator = "10.79.0.1"  # the sim bridge's gateway (inventory/sim-fleet: firewall.operators)
    workers = sorted(h for h in fleet.hosts if h != router.host)
    addr = {h: fleet.hosts[h][0].address for h in fleet.hosts}
    for host in workers:
        rules = lists[host]
        (prefill,) = _units(fleet, host, "prefill")
        (decode,) = _units(fleet, host, "decode")
        other = next(h for h in workers if h != host)
        for port in (prefill.ports["port"], decode.ports["port"]):
            assert _allowed(rules, port, router.address) and _allowed(rules, port, operator)
            assert not _allowed(rules, port, addr[other]) and not _allowed(rules, port, NOT_A_PEER)
        boot = prefill.ports["bootstrap_port"]
        assert _allowed(rules, boot, addr[other])  # any decode may pair with this prefill through the router
        assert not _allowed(rules, boot, NOT_A_PEER)
        assert _allowed(rules, 40000, addr[other]) and not _allowed(rules, 40000, NOT_A_PEER)
        assert not _allowed(rules, 40000, router.address)  # the router moves no KV
        assert not _allowed(rules, prefill.ports["nccl_port"], addr[other])
        assert prefill.environment["UCX_TCP_PORT_RANGE"] == "40000-40999"
    rules = lists[router.host]
    for port in (9090, 9470, router.ports["metrics_port"]):
        assert _allowed(rules, port, operator) and not _allowed(rules, port, addr[workers[0]])
    assert _allowed(rules, router.ports["port"], NOT_A_PEER)


def test_pd_multinode_decode_host_takes_ucx_from_prefill_hosts_only(multinode: Plan) -> None:
    lists = firewall.allow_lists(multinode)
    prefill_host = next(h for h in multinode.hosts if _units(multinode, h, "prefill"))
    decode_host = next(h for h in multinode.hosts if _units(multinode, h, "decode"))
    p_addr, d_addr = multinode.hosts[prefill_host][0].address, multinode.hosts[decode_host][0].address
    assert _allowed(lists[decode_host], 40000, p_addr) and not _allowed(lists[decode_host], 40000, NOT_A_PEER)
    assert _allowed(lists[prefill_host], 40000, d_addr)
    for unit in _units(multinode, prefill_host, "prefill"):
        assert _allowed(lists[prefill_host], unit.ports["bootstrap_port"], d_addr)
        assert not _allowed(lists[prefill_host], unit.ports["bootstrap_port"], NOT_A_PEER)
    for port in (9090, 9470):
        assert not _allowed(lists[prefill_host], port, d_addr)


@pytest.mark.parametrize("inventory", [EXAMPLES / p for p in ("pd-4p4d", "pd-multinode", "mono-tp8", "pd-fleet")]
                         + [REPO_ROOT / "inventory" / "sim-fleet", REPO_ROOT / "inventory" / "sim"],
                         ids=lambda p: p.name)
def test_the_ruleset_is_byte_stable_and_nft_accepts_it(inventory: Path, tmp_path: Path) -> None:
    doc, again = plan_document(plan_inventory(inventory)), plan_document(plan_inventory(inventory))
    assert doc["host_firewalls"] == again["host_firewalls"]
    nft = shutil.which("nft")
    for host, fw in doc["host_firewalls"].items():
        text = fw["ruleset"]
        assert fw["enabled"] and text.startswith("#!/usr/sbin/nft -f\n") and "table inet pdfleet {" in text
        if nft is None:
            continue
        path = tmp_path / f"{host}.nft"
        path.write_text(text)
        proc = subprocess.run([nft, "-c", "-f", str(path)], capture_output=True, text=True, check=False)
        if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
            pytest.skip("nft -c needs CAP_NET_ADMIN")
        assert proc.returncode == 0, (host, proc.stderr)
    if nft is None:
        pytest.skip("nft is not installed (apt-get install nftables) to check the rulesets")


def _base() -> tuple[dict, dict[str, str]]:
    raw = yaml.safe_load((EXAMPLES / "pd-4p4d" / "group_vars" / "all" / "cluster.yml").read_text())
    hosts = yaml.safe_load((EXAMPLES / "pd-4p4d" / "hosts.yml").read_text())
    flat: dict[str, str] = {}

    def walk(node: dict) -> None:
        for name, hv in (node.get("hosts") or {}).items():
            flat[name] = (hv or {}).get("ansible_host", name)
        for child in (node.get("children") or {}).values():
            walk(child or {})

    walk(hosts["all"])
    return raw["pdfleet_cluster"], flat


def _plan(cluster: dict, hosts: dict[str, str] | None = None) -> Plan:
    return build_plan(cluster, hosts or _base()[1], supported_patches(), source="test")


@pytest.mark.parametrize(("field", "value", "says"), [
    ("operators", ["10.0.0.1/33"], "is not an IP address or network"),
    ("scrapers", ["not-an-address"], "is not an IP address or network"),
    ("clients", ["10.0.0.1/24"], "has host bits set (the network is 10.0.0.0/24)"),
    ("operators", "10.0.0.1/32", "expected a list"),
])
def test_a_bad_cidr_is_refused_naming_its_field(field: str, value: object, says: str) -> None:
    cluster = copy.deepcopy(_base()[0])
    cluster["firewall"] = {field: value}
    with pytest.raises(PlanError) as err:
        _plan(cluster)
    text = str(err.value)
    assert f"pdfleet_cluster.firewall.{field}" in text and says in text, text
    assert "Traceback" not in text


@pytest.mark.parametrize(("value", "says"), [("40000", "is not a range"), ("2000-1000", "is not a range"),
                                             ("29990-30010", "holds port 30000")])
def test_a_bad_ucx_port_range_is_refused(value: str, says: str) -> None:
    cluster = copy.deepcopy(_base()[0])
    cluster.setdefault("nixl", {})["ucx_tcp_port_range"] = value
    with pytest.raises(PlanError, match=r"pdfleet_cluster\.nixl\.ucx_tcp_port_range") as err:
        _plan(cluster)
    assert says in str(err.value)


def test_no_ucx_port_range_leaves_ucx_to_the_kernel_and_the_firewall_without_that_rule() -> None:
    cluster = copy.deepcopy(_base()[0])
    cluster.setdefault("nixl", {})["ucx_tcp_port_range"] = ""
    plan = _plan(cluster)
    assert all("UCX_TCP_PORT_RANGE" not in u.environment for u in plan.units())
    assert all("-" not in a.ports for rules in firewall.allow_lists(plan).values() for a in rules)


def test_a_host_name_as_address_is_refused_only_with_the_firewall_on() -> None:
    cluster, hosts = _base()
    named = {h: f"{h}.example" for h in hosts}
    with pytest.raises(PlanError, match=r"ansible_host.*is not an IP address") as err:
        _plan(cluster, named)
    assert "firewall.enabled: false" in str(err.value)
    off = copy.deepcopy(cluster)
    off["firewall"] = {"enabled": False}
    assert _plan(off, named).hosts


def test_enabled_false_gives_no_rules() -> None:
    cluster = copy.deepcopy(_base()[0])
    cluster["firewall"] = {"enabled": False, "operators": ["192.0.2.250/32"]}
    plan = _plan(cluster)
    assert firewall.allow_lists(plan) == {}
    assert all(firewall.render_nft(plan, h) == "" for h in plan.hosts)
    doc = plan_document(plan)
    assert {h: (f["enabled"], f["allow"], f["ruleset"]) for h, f in doc["host_firewalls"].items()} == {
        h: (False, [], "") for h in plan.hosts}
    # The UCX range stays reserved from the kernel's ephemeral ports: that keeps UCX's ports free, not closed.
    workers = {h for h, units in plan.hosts.items() if any(u.role in ("prefill", "decode") for u in units)}
    assert workers and all(doc["host_firewalls"][h]["reserved_ports"] == "40000-40999" for h in workers)


def test_each_prefill_decode_host_reserves_its_ucx_range_and_no_other_host_does(fleet: Plan) -> None:
    doc = plan_document(fleet)
    reserved = {h: f["reserved_ports"] for h, f in doc["host_firewalls"].items()}
    router = next(u.host for u in fleet.units() if u.kind == "router")
    assert reserved.pop(router) == ""  # the gateway host runs no UCX
    assert reserved and set(reserved.values()) == {"40000-40999"}
    cluster, named = _base()
    cluster = copy.deepcopy(cluster)
    cluster.setdefault("nixl", {})["ucx_tcp_port_range"] = ""  # UCX picks its own ports: nothing to reserve
    assert {f["reserved_ports"] for f in plan_document(_plan(cluster, named))["host_firewalls"].values()} == {""}


def test_operators_and_ipv6_clients_render_per_family_with_overlaps_merged() -> None:
    cluster = copy.deepcopy(_base()[0])
    cluster["firewall"] = {"operators": ["192.0.2.0/24", "192.0.2.250", "2001:db8::/64"],
                           "clients": ["198.51.100.0/24"]}
    plan = _plan(cluster)
    (host,) = plan.hosts
    text = firewall.render_nft(plan, host)
    assert "tcp dport 30000 ip saddr { 192.0.2.0/24 } accept" in text  # the host's own 192.0.2.10 is inside
    assert "tcp dport 30000 ip6 saddr { 2001:db8::/64 } accept" in text
    assert "tcp dport 8000 ip saddr { 192.0.2.0/24, 198.51.100.0/24 } accept" in text
    assert 'iif "lo" accept' in text and "ct direction reply accept" in text


# The role's probe: what differs, from what it found.
@pytest.fixture(scope="module")
def probe():
    return load_probe("pdfleet_firewall")


FILE = {"sha256": "a" * 64, "mode": "0644", "owner": "root", "group": "root"}
ENABLED = {"enabled": "enabled", "active": "active"}
UNKNOWN = {"enabled": "unknown", "active": "unknown"}
NO_RESERVED = {"live": "", "file_text": None, "want_live": "", "file": None}


@pytest.mark.parametrize(("want", "found", "differ"), [
    ({"present": True, "file": FILE}, {"installed": True, "file": FILE, "include": True, "table": True,
                                       "unit": ENABLED, "reserved": NO_RESERVED}, set()),
    ({"present": True, "file": FILE}, {"installed": False, "file": None, "include": False, "table": False,
                                       "unit": UNKNOWN, "reserved": NO_RESERVED},
     {"package", "ruleset", "include", "loaded", "boot"}),
    ({"present": True, "file": FILE}, {"installed": True, "file": dict(FILE, sha256="b" * 64), "include": True,
                                       "table": True, "unit": ENABLED, "reserved": NO_RESERVED}, {"ruleset"}),
    ({"present": False, "file": None}, {"installed": True, "file": FILE, "include": True, "table": True,
                                        "unit": ENABLED, "reserved": NO_RESERVED}, {"ruleset", "include", "loaded"}),
    ({"present": False, "file": None}, {"installed": False, "file": None, "include": False, "table": False,
                                        "unit": UNKNOWN, "reserved": NO_RESERVED}, set()),
], ids=["converged", "bare", "changed", "turned-off", "off-and-bare"])
def test_the_role_probe_decides_what_differs(probe, want: dict, found: dict, differ: set[str]) -> None:
    out = probe.differs({"want": want}, found)
    assert set(out) == set(probe.DIFFERS)
    assert {k for k, v in out.items() if v} == differ


def _reserved_found(probe, want: str, live: str, file_text: str | None) -> dict:
    found = {"installed": True, "file": FILE, "include": True, "table": True, "unit": ENABLED}
    found["reserved"] = {"live": live, "file_text": file_text, **probe.reserved(want, live, file_text)}
    return found


def _reserved_differs(probe, want: str, live: str, file_text: str | None) -> set[str]:
    found = _reserved_found(probe, want, live, file_text)
    out = probe.differs({"want": {"present": True, "file": FILE, "reserved_ports": want}}, found)
    return {k for k, v in out.items() if v}


def test_the_probe_reserves_the_ucx_range_keeping_the_hosts_own_reservations(probe) -> None:
    # A bare host: both the kernel's list and the boot file are to be written.
    assert _reserved_differs(probe, "40000-40999", "", None) == {"reserved_file", "reserved_live"}
    # The host already reserves 50000 (its own): kept, in the kernel and in the file that sets the list at boot.
    first = probe.reserved("40000-40999", "50000", None)
    assert first["want_live"] == "40000-40999,50000"
    assert "net.ipv4.ip_local_reserved_ports = 40000-40999,50000\n" in first["file"]
    assert "# pdfleet's own: 40000-40999\n" in first["file"]
    # Converged: nothing differs, and the wanted state is the same again (idempotent).
    assert _reserved_differs(probe, "40000-40999", first["want_live"], first["file"]) == set()
    assert probe.reserved("40000-40999", first["want_live"], first["file"]) == first
    # The kernel lost the list (a reboot without the file, a person's sysctl -w): only the live list differs.
    assert _reserved_differs(probe, "40000-40999", "50000", first["file"]) == {"reserved_live"}
    # The range moves: ours goes, the new one comes, the host's own stays.
    moved = probe.reserved("41000-41999", first["want_live"], first["file"])
    assert moved["want_live"] == "41000-41999,50000"
    # The plan reserves nothing any more: the file goes and the kernel keeps only the host's own.
    gone = probe.reserved("", moved["want_live"], moved["file"])
    assert gone == {"want_live": "50000", "file": None}
    assert _reserved_differs(probe, "", moved["want_live"], moved["file"]) == {"reserved_file", "reserved_live"}
    # Never planned, nothing there: nothing to do, whatever the host reserves itself.
    assert _reserved_differs(probe, "", "50000", None) == set()


def test_the_kernel_keeps_port_0_binds_out_of_the_reserved_range(probe) -> None:
    """What the reservation is for, on this machine's kernel in a throwaway network namespace: with the range
    reserved, no port-0 bind lands in it; the same binds without it do (the kernel's ephemeral range holds it)."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "-n", "true"], capture_output=True,
                                                     check=False).returncode != 0:
        pytest.skip("needs unshare and CAP_SYS_ADMIN (root) for a throwaway network namespace")
    script = r"""
import socket, sys
if sys.argv[1]:
    with open("/proc/sys/net/ipv4/ip_local_reserved_ports", "w") as f:
        f.write(sys.argv[1] + "\n")
# ip_local_port_range narrowed to a window that straddles the range, so that the kernel must choose around it
with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
    f.write("39950 40049\n")
socks, inside = [], 0
for _ in range(150):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", 0))
    except OSError:
        break  # the window is used up
    s.listen(1); socks.append(s)
    inside += 40000 <= s.getsockname()[1] <= 40999
print(len(socks), inside)
"""
    want = probe.reserved("40000-40999", "", None)["want_live"]
    for reserve, check in ((want, lambda n, inside: n == 50 and inside == 0), ("", lambda n, inside: inside == 50)):
        proc = subprocess.run(["unshare", "-n", "python3", "-c", script, reserve], capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        bound, inside = (int(x) for x in proc.stdout.split())
        assert check(bound, inside), (reserve, bound, inside)


# Two throwaway network namespaces (unshare: gone when the script ends) joined by a veth pair: the sim fleet's node1
# with its ruleset loaded and listeners on its ports, and the other side holding every other address.
NETNS_SCRIPT = r"""
set -e
ip link set lo up
unshare -n sleep 30 & peer=$!
while [ "$(readlink /proc/$peer/ns/net)" = "$(readlink /proc/self/ns/net)" ]; do sleep 0.05; done
ip link add vfa type veth peer name vfb
ip link set vfb netns $peer
ip addr add {me}/24 dev vfa
ip link set vfa up
ip route add {stranger}/32 dev vfa
nsenter -t $peer -n sh -c 'ip link set lo up; ip link set vfb up
  for a in {others}; do ip addr add $a/32 dev vfb; done; ip route add {me}/32 dev vfb'
nft -f {ruleset}
python3 - {ports} >/dev/null 2>&1 <<'PY' &
import socket, sys, time
socks = []
for p in sys.argv[1:]:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", int(p)))
    s.listen(16); socks.append(s)
open("{ready}", "w").close()
time.sleep(20)
PY
listener=$!
for _ in $(seq 100); do [ -e {ready} ] && break; sleep 0.1; done
sleep 0.5
nsenter -t $peer -n python3 - <<'PY'
import socket
for src, port in {probes}:
    s = socket.socket(); s.settimeout(0.5); s.bind((src, 0))
    try:
        s.connect(("{me}", port)); print(src, port, "open")
    except ConnectionRefusedError:
        print(src, port, "refused")
    except OSError:
        print(src, port, "timeout")
PY
kill $peer $listener
"""


def test_a_loaded_ruleset_refuses_non_peers_and_leaves_other_ports_alone(fleet: Plan, tmp_path: Path) -> None:
    if not shutil.which("nft") or not shutil.which("unshare") or subprocess.run(
            ["unshare", "-n", "nft", "list", "ruleset"], capture_output=True, check=False).returncode != 0:
        pytest.skip("needs nft, unshare and CAP_NET_ADMIN (root) for a throwaway network namespace")
    addr = {h: units[0].address for h, units in fleet.hosts.items()}
    me, router, peer, operator = addr["node1"], addr["router1"], addr["node3"], "10.79.0.1"
    (prefill,) = _units(fleet, "node1", "prefill")
    worker, boot, nccl = prefill.ports["port"], prefill.ports["bootstrap_port"], prefill.ports["nccl_port"]
    ucx, other = 40500, 22222  # inside the UCX range; a port that is not pdfleet's
    expect = {(router, worker): "open", (operator, worker): "open", (peer, worker): "refused",
              (NOT_A_PEER, worker): "refused", (peer, boot): "open", (NOT_A_PEER, boot): "refused",
              (peer, ucx): "open", (router, ucx): "refused", (peer, nccl): "refused", (NOT_A_PEER, other): "open"}
    ruleset = tmp_path / "node1.nft"
    ruleset.write_text(firewall.render_nft(fleet, "node1"))
    others = " ".join(sorted({router, peer, operator, addr["node2"], NOT_A_PEER}))
    script = NETNS_SCRIPT.format(me=me, stranger=NOT_A_PEER, others=others, ruleset=ruleset, ready=tmp_path / "ready",
                                 ports=" ".join(str(p) for p in sorted({worker, boot, nccl, ucx, other})),
                                 probes=sorted(expect))
    proc = subprocess.run(["unshare", "-n", "bash", "-c", script], capture_output=True, text=True, timeout=60,
                          check=False)
    found = {(src, int(port)): state for src, port, state in (line.split() for line in proc.stdout.splitlines())}
    assert found == expect, proc.stdout + proc.stderr
