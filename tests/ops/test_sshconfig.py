"""The day-2 commands' SSH (Fabric over paramiko) as OpenSSH would reach a host for Ansible: the inventory's
``-o`` options, ``-J`` and ``-F`` file are honoured (first value wins), an argument that cannot be carried over is
refused by name, and host keys are checked against the known_hosts files OpenSSH would read, on every hop.
Connecting for real (a known key accepted, an unknown or changed one refused) is tests/sim_hosts/test_sim_hosts.py."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest
from pdfleet import sshconfig
from pdfleet.inventory import HostConnection
from pdfleet.remote import fabric_connection


def test_command_line_options_come_first_then_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host node1 10.0.0.1\n  HostName 10.0.0.1\n  Port 2200\n  User ops\n  ProxyJump filebastion\n")
    settings = sshconfig.resolve("node1", ["-o", "ProxyJump=clibastion", "-oPort=2222", "-F", str(cfg)], "10.0.0.1")
    found = settings.config().lookup("10.0.0.1")
    assert (found["proxyjump"], found["port"], found["user"]) == ("clibastion", "2222", "ops")
    # like OpenSSH's command line, the options are the destination's, not a ProxyJump hop's
    assert "proxyjump" not in settings.config().lookup("clibastion")


def test_short_flags_are_their_keywords(tmp_path: Path) -> None:
    key = tmp_path / "id"
    found = sshconfig.resolve("n", ["-J", "jump1,jump2", "-p", "2022", "-l", "deploy", "-i", str(key), "-C",
                                    "-o", "ServerAliveInterval 5"]).config().lookup("n")
    assert found["proxyjump"] == "jump1,jump2"
    assert (found["port"], found["user"], found["identityfile"]) == ("2022", "deploy", [str(key)])
    assert found["serveraliveinterval"] == "5"


@pytest.mark.parametrize(("args", "named"), [
    (["-D", "1080"], "'-D'"),
    (["-W", "h:22"], "'-W'"),
    (["-o"], "-o has no value"),
    (["-o", "ProxyJump"], "not Key=Value"),
])
def test_an_argument_that_cannot_be_carried_over_is_refused_by_name(args: list[str], named: str) -> None:
    with pytest.raises(sshconfig.SshSettingsError) as err:
        sshconfig.resolve("gpu07", args)
    assert "host gpu07" in str(err.value) and named in str(err.value)
    assert "ansible_ssh_common_args" in str(err.value)


def test_an_unreadable_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(sshconfig.SshSettingsError, match=r"host n: the ssh_config .*/missing \(-F"):
        sshconfig.resolve("n", ["-F", str(tmp_path / "missing")])


def test_known_hosts_files_follow_the_settings(tmp_path: Path) -> None:
    one, two = tmp_path / "kh1", tmp_path / "kh2"
    named = sshconfig.resolve("n", ["-o", f"UserKnownHostsFile={one} {two}", "-o", "GlobalKnownHostsFile=none"])
    assert named.known_hosts_files("n") == [str(one), str(two)]
    off = sshconfig.resolve("n", ["-o", "UserKnownHostsFile=/dev/null", "-o", "GlobalKnownHostsFile=/dev/null"])
    assert off.known_hosts_files("n") == []
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host *\n")
    default = sshconfig.resolve("n", ["-F", str(cfg)]).known_hosts_files("n")
    assert default[0].endswith("/.ssh/known_hosts") and "/etc/ssh/ssh_known_hosts" in default


def _known_hosts(tmp_path: Path, host: str) -> tuple[Path, paramiko.PKey]:
    key = paramiko.Ed25519Key.from_private_key_file(str(_keyfile(tmp_path)))
    path = tmp_path / "known_hosts"
    path.write_text(f"{host} {key.get_name()} {key.get_base64()}\n")
    return path, key


def _keyfile(tmp_path: Path) -> Path:
    import subprocess

    path = tmp_path / "hostkey"
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def test_fabric_rejects_unknown_keys_on_the_host_and_every_hop(tmp_path: Path) -> None:
    known, key = _known_hosts(tmp_path, "10.0.0.5")
    conn = HostConnection(name="node5", address="10.0.0.5", user="ops",
                          ssh_args=("-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null",
                                    "-J", "bastion1,bastion2"))
    c = fabric_connection(conn)
    hops = []
    hop = c
    while hop is not None and not isinstance(hop, str):
        hops.append(hop)
        assert isinstance(hop.client._policy, paramiko.RejectPolicy), hop
        hop = hop.gateway
    # OpenSSH's order: bastion1 first, bastion2 through it, the host through bastion2
    assert [h.original_host for h in hops] == ["10.0.0.5", "bastion2", "bastion1"]
    assert c.client.get_host_keys().lookup("10.0.0.5")[key.get_name()] == key
    assert c.gateway.client.get_host_keys().lookup("bastion2") is None
    assert (c.user, c.port) == ("ops", 22)


def test_fabric_honours_a_proxy_command(tmp_path: Path) -> None:
    conn = HostConnection(name="n", address="10.0.0.6", ssh_args=("-o", "ProxyCommand=ssh -W %h:%p jump",))
    assert fabric_connection(conn).gateway == "ssh -W 10.0.0.6:22 jump"


def test_the_sim_ssh_config_checks_host_keys_against_its_own_known_hosts(tmp_path: Path) -> None:
    from pdfleet_sim import SimHost
    from pdfleet_sim.hosts import KNOWN_HOSTS, write_known_hosts, write_ssh_config

    hosts = [SimHost("node1", "10.77.0.11"), SimHost("node2", "10.77.0.12")]
    keydir = tmp_path / "hosts" / "node1" / "upper" / "etc" / "ssh"
    keydir.mkdir(parents=True)
    (keydir / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 AAAAC3Nza1 root@node1\n")
    text = write_ssh_config(tmp_path, hosts).read_text()
    assert "StrictHostKeyChecking yes" in text and f"UserKnownHostsFile {tmp_path / KNOWN_HOSTS}" in text
    assert "StrictHostKeyChecking no" not in text and "UserKnownHostsFile /dev/null" not in text
    # node2 has no key yet (never booted): it is simply not known, so SSH to it is refused until it is
    assert write_known_hosts(tmp_path, hosts).read_text() == "node1,10.77.0.11 ssh-ed25519 AAAAC3Nza1\n"


def test_nothing_turns_host_key_checking_off() -> None:
    from pdfleet.paths import REPO_ROOT

    cfg = (REPO_ROOT / "ansible.cfg").read_text()
    code = "\n".join(line for line in cfg.splitlines() if not line.lstrip().startswith("#"))
    assert "host_key_checking" not in code and "StrictHostKeyChecking" not in code
    assert "UserKnownHostsFile" not in code
