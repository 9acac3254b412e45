"""Integration tests: real systemd-nspawn hosts on this machine (root, ~10 s once the image is cached)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pdfleet_sim import SimCluster, down, ssh, status, up
from pdfleet_sim.hosts import machine_name
from pdfleet_sim.network import nft_table
from pdfleet_sim.system import cgroup_dirs, cgroup_pids, mounts_under, pid_alive, wait_until

from .conftest import _print, make_hosts, make_network

pytestmark = pytest.mark.sim


def _ssh(cluster: SimCluster, host: str, command: str) -> str:
    proc = ssh(cluster.state_dir, host, command)
    assert proc.returncode == 0, f"{host}: `{command}` failed: {proc.stderr}"
    return proc.stdout.strip()


def test_each_host_boots_and_answers_ssh(sim_cluster: SimCluster):
    for host in sim_cluster.hosts:
        assert _ssh(sim_cluster, host.name, "systemctl is-system-running --wait") == "running"
        assert _ssh(sim_cluster, host.name, "hostname") == host.name
        addrs = _ssh(sim_cluster, host.name, "ip -4 -o addr show dev host0")
        assert f" {host.address}/24 " in addrs
        assert _ssh(sim_cluster, host.name, "sudo -n true; echo ok") == "ok"


def test_hosts_are_distinct_and_reach_each_other(sim_cluster: SimCluster):
    first, second = sim_cluster.hosts
    ids = {_ssh(sim_cluster, h.name, "cat /etc/machine-id") for h in sim_cluster.hosts}
    assert len(ids) == 2
    _ssh(sim_cluster, first.name, f"ping -c1 -W2 {second.name}")


def test_ssh_config_works_for_plain_ssh_by_name_and_address(sim_cluster: SimCluster):
    for host in sim_cluster.hosts:
        for target in (host.name, host.address):
            out = subprocess.run(
                ["ssh", "-F", str(sim_cluster.ssh_config), "-o", "BatchMode=yes", target, "hostname"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
                stdin=subprocess.DEVNULL,
            )
            assert out.stdout.strip() == host.name


def test_pip_in_host_uses_this_machines_indexes(sim_cluster: SimCluster):
    host = sim_cluster.hosts[0].name
    config = _ssh(sim_cluster, host, "pip3 config list")
    assert "/opt/pypi/simple" in config
    assert _ssh(sim_cluster, host, "test -d /opt/pypi-more/simple && echo yes") == "yes"
    # read-only bind: the host cannot write into this machine's package indexes
    assert ssh(sim_cluster.state_dir, host, "touch /opt/wheels/x").returncode != 0


def test_up_again_is_a_no_op(sim_cluster: SimCluster):
    before = {s.name: s.wrapper_pid for s in status(sim_cluster.state_dir)}
    again = up(
        sim_cluster.hosts, sim_cluster.network, state_dir=sim_cluster.state_dir, progress=_print, with_runtime=False
    )
    assert again.started == ()
    after = {s.name: s.wrapper_pid for s in status(sim_cluster.state_dir)}
    assert after == before
    assert all(pid for pid in after.values())


def _comm(pid: int) -> str:
    """A process's name; '' when it exited since the cgroup was listed (the host's processes come and go)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def test_killed_host_is_restarted_by_up(sim_cluster: SimCluster):
    victim = sim_cluster.hosts[1]
    _ssh(sim_cluster, victim.name, "echo survives > /root/marker")
    machine = machine_name(sim_cluster.state_dir, victim.name)
    nspawn = [p for p in cgroup_pids(machine) if _comm(p) == "systemd-nspawn"]
    assert nspawn, "no systemd-nspawn process found for the host"
    for pid in nspawn:
        os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: status(sim_cluster.state_dir)[1].state == "stopped", 15)

    again = up(
        sim_cluster.hosts, sim_cluster.network, state_dir=sim_cluster.state_dir, progress=_print, with_runtime=False
    )
    assert again.started == (victim.name,)
    assert _ssh(sim_cluster, victim.name, "systemctl is-system-running --wait") == "running"
    assert _ssh(sim_cluster, victim.name, "cat /root/marker") == "survives"  # its disk persists
    assert [s.state for s in status(sim_cluster.state_dir)] == ["running", "running"]


def _leftovers(state_dir: Path, bridge: str, names: list[str]) -> dict[str, object]:
    machines = [machine_name(state_dir, n) for n in names]
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
    return {
        "processes": sorted(p for m in machines for p in cgroup_pids(m)),
        "cgroups": [str(d) for m in machines for d in cgroup_dirs(m) if d.exists()],
        "mounts": [str(m) for m in mounts_under(state_dir)] if state_dir.exists() else [],
        "bridge": Path("/sys/class/net", bridge).exists(),
        "veths": [m for m in machines if Path("/sys/class/net", f"vb-{m}").exists()],
        "nft table": nft_table(bridge) in tables,
        "state dir": state_dir.exists(),
    }


NOTHING = {
    "processes": [],
    "cgroups": [],
    "mounts": [],
    "bridge": False,
    "veths": [],
    "nft table": False,
    "state dir": False,
}


def test_down_leaves_nothing_even_after_a_crash(sim_state_dir: Path):
    network = make_network(1)
    hosts = make_hosts(network, 2)
    names = [h.name for h in hosts]
    cluster = up(hosts, network, state_dir=sim_state_dir, progress=_print, with_runtime=False)
    assert _leftovers(sim_state_dir, network.bridge, names)["bridge"] is True
    # Simulate a crash of the supervisor of one host: SIGKILL, so nothing of it shuts down cleanly.
    pid = status(sim_state_dir)[0].wrapper_pid
    assert pid and pid_alive(pid)
    os.kill(pid, signal.SIGKILL)

    down(sim_state_dir, _print)
    assert _leftovers(sim_state_dir, network.bridge, names) == NOTHING
    assert status(sim_state_dir) == []
    assert not cluster.ssh_config.exists()
    down(sim_state_dir, _print)  # a second `down` is harmless


def test_down_after_a_partial_up(sim_state_dir: Path):
    """A cluster file and network written, no host started (e.g. `up` died while building the image)."""
    network = make_network(2)
    hosts = make_hosts(network, 1)
    with pytest.raises(Exception, match="boom"):

        def boom(msg: str) -> None:
            if "starting" in msg:
                raise RuntimeError("boom")

        up(hosts, network, state_dir=sim_state_dir, progress=boom, with_runtime=False)
    assert json.loads((sim_state_dir / "cluster.json").read_text())["network"]["bridge"] == network.bridge
    down(sim_state_dir, _print)
    assert _leftovers(sim_state_dir, network.bridge, [h.name for h in hosts]) == NOTHING


def _with_known_hosts(cluster: SimCluster, tmp_path: Path, lines: str) -> Path:
    """A copy of the sim's ssh_config that checks host keys against a known_hosts holding ``lines``."""
    known = tmp_path / "known_hosts"
    known.write_text(lines)
    text = cluster.ssh_config.read_text().replace(str(cluster.state_dir / "known_hosts"), str(known))
    assert str(known) in text
    config = tmp_path / "ssh_config"
    config.write_text(text)
    return config


def test_host_keys_are_checked_by_ssh_ansible_and_fabric(sim_cluster: SimCluster, tmp_path: Path):
    """The sim's known_hosts lets SSH, Ansible and the day-2 commands (Fabric) in; an unknown key and a changed
    key (another host's answering at this address) are refused by all three, naming the cause."""
    from pdfleet.inventory import HostConnection
    from pdfleet.paths import REPO_ROOT
    from pdfleet.remote import RemoteError, run

    first, second = sim_cluster.hosts
    known = (sim_cluster.state_dir / "known_hosts").read_text()
    assert f"{first.name},{first.address} ssh-ed25519 " in known and f"{second.name},{second.address} " in known

    def fabric(config: Path) -> tuple[int, str, str]:
        return run(HostConnection(name=second.name, address=second.address, user="root",
                                  ssh_args=("-F", str(config))), "hostname")

    def ansible(config: Path) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o ControlPath=none"}
        return subprocess.run([str(Path(sys.executable).parent / "ansible"), "all", "-i", f"{second.address},",
                               "-u", "root", "-m", "ansible.builtin.ping",
                               "-e", f"ansible_ssh_common_args='-F {config}'"],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)

    assert fabric(sim_cluster.ssh_config)[1].strip() == second.name
    assert ansible(sim_cluster.ssh_config).returncode == 0
    # another host's keys under this host's name and address: the key changed
    other = "".join(line.replace(f"{first.name},{first.address}", f"{second.name},{second.address}") + "\n"
                    for line in known.splitlines() if line.startswith(f"{first.name},"))
    for lines, said in ((other, "not the one known_hosts"), ("", "in none of the known_hosts files")):
        config = _with_known_hosts(sim_cluster, tmp_path, lines)
        proc = subprocess.run(["ssh", "-F", str(config), "-o", "BatchMode=yes", "-o", "ControlMaster=no",
                               "-o", "ControlPath=none", second.name, "true"],
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 255 and "Host key verification failed" in proc.stderr, proc.stderr
        refused = ansible(config)
        assert refused.returncode != 0 and "Host key verification failed" in refused.stdout + refused.stderr
        with pytest.raises(RemoteError) as err:
            fabric(config)
        assert f"host {second.name} ({second.address})" in str(err.value) and said in str(err.value), err.value
