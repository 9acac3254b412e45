"""Unit tests of the sim layer that need neither root nor containers."""

from __future__ import annotations

from pathlib import Path

import pytest
from pdfleet_sim import SimError, SimHost, SimNetwork, image
from pdfleet_sim import hosts as sim_hosts
from pdfleet_sim.hosttypes import SimCluster, validate_host_name
from pdfleet_sim.network import validate

NET = SimNetwork("pdfleet0", "10.77.0.0/24", "10.77.0.1")


@pytest.mark.parametrize("name", ["node1", "prefill-0", "a"])
def test_good_host_names(name):
    validate_host_name(name)


@pytest.mark.parametrize("name", ["", "Node1", "1node", "node_1", "x" * 32, "node 1"])
def test_bad_host_names(name):
    with pytest.raises(SimError, match="not usable"):
        validate_host_name(name)


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ([SimHost("a", "10.78.0.5")], "not a host address"),
        ([SimHost("a", "10.77.0.255")], "not a host address"),
        ([SimHost("a", "10.77.0.1")], "already used by the gateway"),
        ([SimHost("a", "10.77.0.5"), SimHost("b", "10.77.0.5")], "already used by a"),
        ([SimHost("a", "banana")], "does not appear to be"),
    ],
)
def test_bad_addresses(hosts, message):
    with pytest.raises(SimError, match=message):
        validate(NET, hosts)


@pytest.mark.parametrize(
    "network",
    [
        SimNetwork("pdfleet0", "8.8.8.0/24", "8.8.8.1"),
        SimNetwork("pdfleet0", "10.77.0.0/24", "10.78.0.1"),
        SimNetwork("a-very-long-bridge-name", "10.77.0.0/24", "10.77.0.1"),
    ],
)
def test_bad_networks(network):
    with pytest.raises(SimError):
        validate(network, [])


def test_machine_names_are_unique_per_state_dir_and_fit_interface_names():
    a = sim_hosts.machine_name(Path("/var/lib/a"), "node1")
    b = sim_hosts.machine_name(Path("/var/lib/b"), "node1")
    assert a != b
    assert len(f"vb-{a}") <= 15


def test_ssh_config_matches_name_and_address(tmp_path):
    path = sim_hosts.write_ssh_config(tmp_path, [SimHost("node1", "10.77.0.11")])
    text = path.read_text()
    assert "Host node1 10.77.0.11" in text
    assert "StrictHostKeyChecking yes" in text
    assert f"UserKnownHostsFile {tmp_path / 'known_hosts'}" in text
    assert f"IdentityFile {tmp_path / 'id_ed25519'}" in text


def test_ansible_vars_point_at_ssh_config(tmp_path):
    host = SimHost("node1", "10.77.0.11")
    cluster = SimCluster(
        (host,),
        NET,
        tmp_path,
        tmp_path / "ssh_config",
        tmp_path / "id_ed25519",
        Path("/var/cache/pdfleet-sim/golden-x"),
    )
    assert cluster.ansible_host_vars(host) == {
        "ansible_host": "10.77.0.11",
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(tmp_path / "id_ed25519"),
        "ansible_ssh_common_args": f"-F {tmp_path / 'ssh_config'}",
    }


def test_recipe_hash_is_stable_and_covers_the_package_list(monkeypatch):
    first = image.recipe_hash(image.golden_recipe())
    assert first == image.recipe_hash(image.golden_recipe())
    monkeypatch.setattr(image, "GOLDEN_PACKAGES", (*image.GOLDEN_PACKAGES, "vim"))
    assert image.recipe_hash(image.golden_recipe()) != first


def test_runtime_is_keyed_by_image_and_packages(monkeypatch):
    golden = Path("/var/cache/pdfleet-sim/golden-abc")
    first = image.runtime_path(Path("/c"), golden)
    assert first != image.runtime_path(Path("/c"), Path("/var/cache/pdfleet-sim/golden-def"))
    monkeypatch.setattr(image, "RUNTIME_PACKAGES", (*image.RUNTIME_PACKAGES, "sglang"))
    assert image.runtime_path(Path("/c"), golden) != first


def test_not_root_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(SimError, match="needs root"):
        sim_hosts.up([SimHost("node1", "10.77.0.11")], NET, state_dir=tmp_path)
    with pytest.raises(SimError, match="needs root"):
        sim_hosts.down(tmp_path)


def _sim_inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars/all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(
        "all:\n  children:\n    g:\n      hosts:\n"
        "        node1:\n          ansible_host: 10.77.0.11\n        node2:\n          ansible_host: 10.77.0.12\n"
    )
    (inv / "group_vars/all/sim.yml").write_text(
        "pdfleet_sim:\n  bridge: pdfleet0\n  cidr: 10.77.0.0/24\n  gateway: 10.77.0.1\n"
        f"  state_dir: {tmp_path / 'state'}\n  with_runtime: false\n"
    )
    return inv


def test_cli_reads_hosts_and_settings_from_the_inventory(tmp_path):
    from pdfleet_sim.cli import _inventory_sim

    sim_hosts_, sim = _inventory_sim(_sim_inventory(tmp_path))
    assert sim_hosts_ == [SimHost("node1", "10.77.0.11"), SimHost("node2", "10.77.0.12")]
    assert sim["bridge"] == "pdfleet0"
    assert sim["with_runtime"] is False


def test_cli_status_uses_the_inventorys_state_dir(tmp_path, capsys):
    from pdfleet_sim.cli import main

    assert main(["sim", "status", "-i", str(_sim_inventory(tmp_path))]) == 0
    assert f"no sim cluster in {tmp_path / 'state'}" in capsys.readouterr().out


def test_cli_rejects_an_inventory_without_pdfleet_sim(tmp_path, capsys):
    from pdfleet_sim.cli import main

    inv = _sim_inventory(tmp_path)
    (inv / "group_vars/all/sim.yml").unlink()
    assert main(["sim", "status", "-i", str(inv)]) == 2
    assert "not a sim inventory" in capsys.readouterr().err


def test_cli_refuses_an_ssh_config_path_that_is_not_the_state_dirs(tmp_path, capsys):
    """The sim inventories write the ssh_config path out (no template per task); one that names another state
    directory than pdfleet_sim.state_dir is refused with the value to set, and the right one is accepted."""
    from pdfleet_sim.cli import _inventory_sim, main

    inv = _sim_inventory(tmp_path)
    sim_file = inv / "group_vars/all/sim.yml"
    base = sim_file.read_text()
    sim_file.write_text(base + "ansible_ssh_common_args: -F /var/lib/pdfleet-sim/ssh_config\n")
    assert main(["sim", "status", "-i", str(inv)]) == 2
    err = capsys.readouterr().err
    assert "ansible_ssh_common_args" in err and f"-F {tmp_path / 'state' / 'ssh_config'}" in err, err
    _inventory_sim.cache_clear()
    sim_file.write_text(base + f"ansible_ssh_common_args: -F {tmp_path / 'state' / 'ssh_config'}\n")
    assert main(["sim", "status", "-i", str(inv)]) == 0


def test_the_repository_sim_inventories_name_their_own_ssh_config():
    from pdfleet.paths import REPO_ROOT
    from pdfleet_sim.cli import _inventory_sim

    for name in ("sim", "sim-fleet", "sim-mono"):
        _inventory_sim(REPO_ROOT / "inventory" / name)  # raises SimError when the path is not the state_dir's
