"""The rollout's pair gate reads journals over SSH with connection settings the play hands it: the
pdfleet_connections filter over hostvars gives exactly what `Inventory.connection` says in-process, for every -i,
and works with a Vault-encrypted variable and --vault-password-file (the inventory is never loaded a second time
without the Vault secret, issue 30)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from pdfleet.inventory import connections
from pdfleet.paths import REPO_ROOT

FLEET = REPO_ROOT / "inventory" / "sim-fleet"
BIN = Path(sys.executable).parent


def _play_connections(tmp_path: Path, hosts: list[str], *args: str) -> dict:
    """The filter's answer in a real play (ansible-playbook, the repository's ansible.cfg)."""
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "connections", "ansible.builtin.copy": {
            "content": "{{ " + json.dumps(hosts) + " | pdfleet.cluster.pdfleet_connections(hostvars) | to_json }}",
            "dest": str(tmp_path / "out.json"), "mode": "0600"}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(BIN / "ansible-playbook"), *args, str(tmp_path / "play.yml")], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads((tmp_path / "out.json").read_text())


def test_the_filter_reads_the_same_connections_as_the_inventory(tmp_path: Path) -> None:
    hosts = ["node1", "node3", "router1"]
    found = _play_connections(tmp_path, hosts, "-i", str(FLEET))
    expected = {h: {**dataclasses.asdict(c), "ssh_args": list(c.ssh_args)}
                for h, c in connections(FLEET, hosts).items()}
    assert found == expected
    assert found["node3"]["address"] == "10.79.0.13" and "-F" in found["node3"]["ssh_args"]


def test_a_vaulted_connection_variable_is_read_with_the_plays_vault_secret(tmp_path: Path) -> None:
    """The bad case it replaces: the gate re-read the inventory in a child without the Vault secret and failed."""
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"gpu01": {"ansible_host": "192.0.2.21"}}}}))
    password = tmp_path / "vault-pass"
    password.write_text("correct horse\n")
    password.chmod(0o600)
    plain = tmp_path / "plain.yml"
    plain.write_text("ansible_user: deploy\nansible_port: 2222\n")
    subprocess.run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password), "--output",
                    str(inv / "group_vars" / "all" / "vault.yml"), str(plain)], check=True, capture_output=True,
                   timeout=120)
    assert b"$ANSIBLE_VAULT" in (inv / "group_vars" / "all" / "vault.yml").read_bytes()
    found = _play_connections(tmp_path, ["gpu01"], "-i", str(inv), "--vault-password-file", str(password))
    assert (found["gpu01"]["user"], found["gpu01"]["port"], found["gpu01"]["address"]) == ("deploy", 2222,
                                                                                          "192.0.2.21")
