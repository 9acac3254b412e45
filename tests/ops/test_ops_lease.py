"""`pdfleet ops drain / undrain / restart` and the pair lease on the router host (issue 30 item 5): a pair the
watchdog or a rollout holds is refused with the pair untouched and the holder named; drain keeps the lease until
undrain releases it; restart releases it once the pair is back and keeps it (saying so) when the pair stays out;
undrain refuses a pair another actor holds unless --break-lease (a pair the watchdog left out for a person is that
person's to put back). The router host is fake; its lease commands run for real, against a tmp directory."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pdfleet import fleet, lease
from pdfleet.fleet.load import IdleResult
from pdfleet.inventory_plan import plan_inventory
from pdfleet.lease_client import RemoteLeases
from pdfleet.ops import tasks
from pdfleet.ops.leasing import drain_pair, gateway_host, ops_leases, undrain_pair
from pdfleet.ops.restart import RestartSteps, restart_pair
from pdfleet.ops.tasks import FAILED, OK
from pdfleet.paths import REPO_ROOT
from pdfleet.privilege import SUDO

from ops.fakes import LoggedActions

PAIR = fleet.Pair("node2", (fleet.Member("pdfleet-prefill1", "prefill", "http://10.77.0.12:30000", host="node2"),
                            fleet.Member("pdfleet-decode1", "decode", "http://10.77.0.12:30001", host="node2")))


@dataclass
class Hosts:
    """The hosts' answers: the access probe as root (or a user without sudo), systemctl as success, and the lease
    commands on the router host run here for real, in ``leases``."""

    leases: Path
    uid: str = "0"
    commands: list[tuple[str, str]] = field(default_factory=list)

    def run(self, host: str, command: str) -> tuple[int, str, str]:
        self.commands.append((host, command))
        if command.startswith("id -u;"):
            return 0, f"{self.uid}\nnosudo\n", ""
        if command.startswith("python3 -c "):
            assert host == "router1", host
            proc = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60)
            return proc.returncode, proc.stdout, proc.stderr
        return 0, "", ""

    def store(self) -> RemoteLeases:
        return RemoteLeases(self.run, "router1", "ops", directory=self.leases)


@dataclass
class Router:
    log: list[str] = field(default_factory=list)
    readd_ok: bool = True

    def drain(self, pair: fleet.Pair) -> fleet.DrainResult:
        self.log.append("drain")
        return fleet.DrainResult(pair.host, [], IdleResult(True, 0.1, []), 0.1)

    def readd(self, pair: fleet.Pair) -> fleet.ReaddResult:
        self.log.append("readd")
        return fleet.ReaddResult(pair.host, list(pair.urls), self.readd_ok, {}, {}, 1, 0.1,
                                 [] if self.readd_ok else ["no request reached pdfleet-decode1"])


@pytest.fixture
def hosts(tmp_path: Path) -> Hosts:
    return Hosts(tmp_path)


def test_the_lease_store_is_on_the_router_host_and_needs_root_or_sudo(hosts: Hosts) -> None:
    plan = plan_inventory(REPO_ROOT / "inventory" / "sim-fleet")
    assert gateway_host(plan) == "router1"
    assert ops_leases(plan, hosts.run).prefix == ""
    hosts.uid = "1001"
    with pytest.raises(lease.LeaseError, match=r"host router1: the SSH user \(uid 1001\) is not root"):
        ops_leases(plan, hosts.run)
    router = Router()
    line = drain_pair(PAIR, lambda: ops_leases(plan, hosts.run), router.drain)
    assert line.code == FAILED and "not drained (the pair still serves)" in line.text and router.log == []


def test_drain_is_refused_while_the_watchdog_restarts_the_pair(hosts: Hosts) -> None:
    lease.acquire("node2", "watchdog", "restart", who="pdfleet-watchdog@router1 pid 4", ttl_s=300,
                  directory=hosts.leases)
    router = Router()
    line = drain_pair(PAIR, hosts.store, router.drain)
    assert line.code == FAILED and router.log == []
    assert "watchdog (pdfleet-watchdog@router1 pid 4) for restart" in line.text and "not drained" in line.text


def test_drain_keeps_the_lease_until_undrain_releases_it(hosts: Hosts) -> None:
    router = Router()
    line = drain_pair(PAIR, hosts.store, router.drain)
    held = lease.read("node2", hosts.leases)
    assert line.code == OK and router.log == ["drain"] and "held by ops until `pdfleet ops undrain node2`" in line.text
    assert held is not None and (held.kind, held.purpose, held.expires) == ("ops", "drain", None)
    with pytest.raises(lease.LeaseHeld):  # the rollout (and the watchdog) leave the drained pair alone
        lease.acquire("node2", "rollout", "rollout", directory=hosts.leases)
    line = undrain_pair(PAIR, hosts.store, router.readd)
    assert line.code == OK and router.log == ["drain", "readd"] and "lease released" in line.text
    assert lease.read("node2", hosts.leases) is None


def test_a_drain_that_fails_keeps_the_lease_and_says_how_to_undo_it(hosts: Hosts) -> None:
    def broken(pair: fleet.Pair) -> fleet.DrainResult:
        raise fleet.RouterError("router http://10.77.0.10:8000: DELETE /workers/x: 503")

    line = drain_pair(PAIR, hosts.store, broken)
    assert line.code == FAILED and "503" in line.text and "`pdfleet ops undrain node2` puts it back" in line.text
    assert lease.read("node2", hosts.leases).purpose == "drain"


def test_undrain_refuses_a_pair_the_rollout_holds_unless_the_lease_is_broken(hosts: Hosts) -> None:
    lease.acquire("node2", "rollout", "rollout", who="ci@ctl pid 5", ttl_s=7200, directory=hosts.leases)
    router = Router()
    line = undrain_pair(PAIR, hosts.store, router.readd)
    assert line.code == FAILED and router.log == [] and "rollout (ci@ctl pid 5)" in line.text
    assert "--break-lease" in line.text and lease.read("node2", hosts.leases).kind == "rollout"
    line = undrain_pair(PAIR, hosts.store, router.readd, break_lease=True)
    assert line.code == OK and router.log == ["readd"] and "lease broken: it was held by rollout" in line.text
    assert lease.read("node2", hosts.leases) is None


def test_undrain_puts_back_a_pair_the_watchdog_left_out_for_a_person(hosts: Hosts) -> None:
    lease.acquire("node2", "watchdog", "left_out", who="pdfleet-watchdog@router1 pid 4", directory=hosts.leases)
    router = Router()
    line = undrain_pair(PAIR, hosts.store, router.readd)
    assert line.code == OK and router.log == ["readd"] and lease.read("node2", hosts.leases) is None
    lease.acquire("node2", "watchdog", "restart", who="wd", ttl_s=300, directory=hosts.leases)  # but not this
    line = undrain_pair(PAIR, hosts.store, router.readd)
    assert line.code == FAILED and router.log == ["readd"] and "watchdog (wd) for restart" in line.text


def test_an_undrain_that_is_not_confirmed_keeps_the_lease_as_a_drain(hosts: Hosts) -> None:
    lease.acquire("node2", "ops", "drain", who="alice", directory=hosts.leases)
    line = undrain_pair(PAIR, hosts.store, Router(readd_ok=False).readd)
    held = lease.read("node2", hosts.leases)
    assert line.code == FAILED and "its lease is held by ops as a drain" in line.text
    assert held is not None and (held.kind, held.purpose, held.expires) == ("ops", "drain", None)


def _steps(hosts: Hosts, log: list[str], gate_ok: bool = True) -> RestartSteps:
    def drain(pair: fleet.Pair) -> fleet.DrainResult:
        log.append("drain")
        return fleet.DrainResult(pair.host, [], IdleResult(True, 0.1, []), 0.1)

    return RestartSteps(drain=drain, actions=lambda run: LoggedActions(log, gate_ok), warn=log.append,
                        drain_timeout_s=120, leases=hosts.store)


def test_restart_is_refused_while_a_rollout_is_on_the_pair(hosts: Hosts) -> None:
    lease.acquire("node2", "rollout", "rollout", who="ci@ctl pid 5", ttl_s=7200, directory=hosts.leases)
    log: list[str] = []
    line = restart_pair(PAIR, hosts.run, _steps(hosts, log))
    assert line.code == FAILED and log == [] and "nothing drained (the pair still serves)" in line.text
    assert "rollout (ci@ctl pid 5) for rollout" in line.text


def test_restart_holds_the_lease_and_releases_it_once_the_pair_is_back(hosts: Hosts) -> None:
    log: list[str] = []
    seen: list[lease.Lease | None] = []
    steps = _steps(hosts, log)
    real_drain = steps.drain
    steps.drain = lambda pair: (seen.append(lease.read("node2", hosts.leases)), real_drain(pair))[1]
    line = restart_pair(PAIR, hosts.run, steps)
    assert line.code == OK and log == ["drain", "restart", "gate", "readd"] and "lease released" in line.text
    assert seen[0] is not None and (seen[0].kind, seen[0].purpose) == ("ops", "restart")
    assert lease.read("node2", hosts.leases) is None


def test_a_restart_that_leaves_the_pair_out_keeps_the_lease_and_says_so(hosts: Hosts) -> None:
    log: list[str] = []
    line = restart_pair(PAIR, hosts.run, _steps(hosts, log, gate_ok=False))
    held = lease.read("node2", hosts.leases)
    assert line.code == FAILED and "readd" not in log and "OUT of the router" in line.text
    assert "ops keeps its lease (as a drain" in line.text
    assert held is not None and (held.kind, held.purpose, held.expires) == ("ops", "drain", None)


def test_two_peoples_restarts_of_one_pair_never_run_at_once(hosts: Hosts) -> None:
    """Bob's `ops restart` while Alice's is at work on the pair (both kind ops): refused, nothing drained, Alice
    named; her lease untouched. Bob may still undrain a pair Alice merely drained (a person's drain)."""
    lease.acquire("node2", "ops", "restart", who="alice@ctl pid 4242", ttl_s=3600, directory=hosts.leases)
    log: list[str] = []
    line = restart_pair(PAIR, hosts.run, _steps(hosts, log))
    assert line.code == FAILED and log == [] and "nothing drained (the pair still serves)" in line.text
    assert "ops (alice@ctl pid 4242) for restart" in line.text and "another `pdfleet ops restart`" in line.text
    held = lease.read("node2", hosts.leases)
    assert held is not None and held.who == "alice@ctl pid 4242" and held.purpose == "restart"
    # Bob's undrain of the pair Alice is restarting: refused too (it would put back what her restart took out)
    router = Router()
    line = undrain_pair(PAIR, hosts.store, router.readd)
    assert line.code == FAILED and router.log == [] and "alice@ctl pid 4242" in line.text
    # once Alice's restart left it as a drain (no expiry), it is any person's to put back
    lease.acquire("node2", "ops", "drain", who="alice@ctl pid 4242", directory=hosts.leases)
    line = undrain_pair(PAIR, hosts.store, router.readd)
    assert line.code == OK and router.log == ["readd"] and lease.read("node2", hosts.leases) is None


def test_a_rerun_here_takes_over_the_lease_of_an_interrupted_restart(hosts: Hosts) -> None:
    """An `ops restart` killed here (its process gone) left its lease at work: the same user's rerun on this machine
    takes it over; a live process's is refused."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    me = lease.who_am_i().rpartition(" pid ")[0]
    lease.acquire("node2", "ops", "restart", who=f"{me} pid {gone.pid}", ttl_s=3600, directory=hosts.leases)
    log: list[str] = []
    line = restart_pair(PAIR, hosts.run, _steps(hosts, log))
    assert line.code == OK and log == ["drain", "restart", "gate", "readd"], line.text
    alive = subprocess.Popen(["sleep", "30"])
    try:
        lease.acquire("node2", "ops", "restart", who=f"{me} pid {alive.pid}", ttl_s=3600, directory=hosts.leases)
        log.clear()
        line = restart_pair(PAIR, hosts.run, _steps(hosts, log))
        assert line.code == FAILED and log == [] and f"pid {alive.pid}" in line.text
    finally:
        alive.kill()
        alive.wait()


def test_status_shows_the_lease_a_pair_is_held_under() -> None:
    plan = plan_inventory(REPO_ROOT / "inventory" / "sim-fleet")
    urls = dict.fromkeys((u for p in fleet.pairs_from_plan(plan).values() for u in p.urls), "ready")

    def run(host: str, command: str) -> tuple[int, str, str]:
        units = command.split("systemctl is-active ", 1)[1].split(";", 1)[0].split()
        return 0, "\n".join("active" for _ in units) + "\n--\n{}\n--\n\n--\n", ""

    held = lease.Lease("node2", "rollout", "ci@ctl pid 5", "rollout", 1000.0, None)
    lines = {x.host: x for x in tasks.status(plan, run, urls, "none found", {"node2": held})}
    assert "leased to rollout (ci@ctl pid 5) for rollout" in lines["node2"].text
    assert "leased" not in lines["node1"].text
    assert "lease unknown" in {x.host: x for x in tasks.status(plan, run, urls, "none found", None)}["node1"].text


def test_sudo_prefix_reaches_the_lease_command(hosts: Hosts) -> None:
    store = RemoteLeases(hosts.run, "router1", "ops", SUDO, directory=hosts.leases)
    with pytest.raises(lease.LeaseError, match="host router1"):  # this fake host has no sudo command to run
        store.acquire("node2", "drain")
    assert hosts.commands[-1][1].startswith("sudo -n python3 -c ")
