"""pdfleet reads inventories with ansible-core: host_vars/, any group's vars, several -i, -e and Vault give the
same plan and the same host addresses in every pdfleet command as in ansible-playbook.

The hosts are on loopback addresses where nothing listens: each command's attempt (or its loaded target) shows
which address and port it would use, and no traffic leaves the machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pdfleet import conformance
from pdfleet.errors import InventoryError
from pdfleet.inventory import InventorySource, load_inventory
from pdfleet.paths import REPO_ROOT

BIN = Path(sys.executable).parent
EXAMPLE = REPO_ROOT / "inventory" / "examples" / "pd-4p4d"
VAULT_PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> InventorySource:
    """A production-shaped inventory: host_vars with address and port, a group's vars, a vaulted file, and a
    cluster model whose router port comes from the vault and is overridden by -e."""
    root = tmp_path_factory.mktemp("prod")
    inv = root / "inventory"
    shutil.copytree(EXAMPLE, inv)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"pdfleet_hosts": {"hosts": {"gpu01": None}}}}}))
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "gpu01.yml").write_text("ansible_host: 127.0.0.3\nansible_port: 2299\n")
    (inv / "group_vars" / "pdfleet_hosts.yml").write_text("ansible_user: deploy\n")
    cluster_file = inv / "group_vars" / "all" / "cluster.yml"
    cluster = yaml.safe_load(cluster_file.read_text())
    cluster["pdfleet_cluster"]["router"]["port"] = "{{ pdfleet_router_port }}"
    cluster["pdfleet_cluster"]["router"]["drain_timeout_s"] = 45
    cluster_file.write_text(yaml.safe_dump(cluster, sort_keys=False))
    password = root / "vault-pass"
    password.write_text(VAULT_PASSWORD + "\n")
    secrets = inv / "group_vars" / "all" / "vault.yml"
    secrets.write_text("pdfleet_router_port: 8123\nvault_router_api_key: s3cret\n")
    subprocess.run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password), str(secrets)],
                   check=True, capture_output=True, cwd=REPO_ROOT)
    assert secrets.read_text().startswith("$ANSIBLE_VAULT")
    return InventorySource((inv,), ('{"pdfleet_router_port": 8124}',), (str(password),))


@pytest.fixture(scope="module")
def seen_by_ansible(prod: InventorySource, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("show") / "show.json"
    proc = subprocess.run([str(BIN / "ansible-playbook"), *prod.ansible_args(), "-e", f"pdfleet_show_out={out}",
                           str(Path(__file__).parent / "show_plan.yml")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


def pdfleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "pdfleet"), *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def test_plan_document_equals_the_filters(prod: InventorySource, seen_by_ansible: dict) -> None:
    proc = pdfleet("plan", *prod.ansible_args(), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc == seen_by_ansible["plan"]
    assert doc["schema"] == "pdfleet-plan/1"
    assert doc["router_url"] == "http://127.0.0.3:8124"  # address from host_vars, port from the vault, then -e


def test_the_inventorys_drain_timeout_reaches_the_plan_and_the_roles(prod: InventorySource,
                                                                     seen_by_ansible: dict) -> None:
    """The router's settings are the plan's (router.*): the units role and the rollout wait as long as the
    inventory says, not a default of their own."""
    assert seen_by_ansible["plan"]["router"]["drain_timeout_s"] == 45
    assert seen_by_ansible["plan"]["router"]["port"] == 8124
    assert seen_by_ansible["drain_timeouts"] == {"gpu01": 45}


def test_addresses_and_connection_match_ansible(prod: InventorySource, seen_by_ansible: dict) -> None:
    inv = load_inventory(prod)
    assert inv.hosts == seen_by_ansible["hosts"] == {"gpu01": "127.0.0.3"}
    conn = inv.connection("gpu01")
    assert (conn.address, conn.port, conn.user) == ("127.0.0.3", seen_by_ansible["ports"]["gpu01"],
                                                    seen_by_ansible["users"]["gpu01"]) == ("127.0.0.3", 2299, "deploy")
    targets = conformance.load(prod).targets
    assert [(t.name, t.connection) for t in targets] == [("gpu01", conn)]
    assert targets[0].url == "ssh://deploy@127.0.0.3:2299"


def test_render_uses_the_same_plan(prod: InventorySource, tmp_path: Path) -> None:
    proc = pdfleet("render", *prod.ansible_args(), "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    router = (tmp_path / "gpu01" / "pdfleet-router.service").read_text()
    assert "--host 127.0.0.3 --port 8124" in router


def test_patch_status_and_verify_reach_the_same_host(prod: InventorySource, tmp_path: Path) -> None:
    proc = pdfleet("patch", "status", *prod.ansible_args(), "--json")
    assert proc.returncode == 2
    (host,) = json.loads(proc.stdout)["hosts"]
    assert host["host"] == "gpu01" and "127.0.0.3:2299" in host["error"]
    report = tmp_path / "r.json"
    proc = pdfleet("verify", *prod.ansible_args(), "--http-timeout", "1", "--report", str(report))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["target"]["router"] == "http://127.0.0.3:8124"
    assert {w["url"] for w in data["target"]["workers"]} == {"http://127.0.0.3:30000", "http://127.0.0.3:30001"}


def test_without_the_vault_password_the_error_names_the_way_out(prod: InventorySource) -> None:
    proc = pdfleet("plan", "-i", str(prod.path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "vault" in proc.stderr.lower()


@pytest.mark.parametrize(("text", "words"), [
    ("all:\n  hosts: [a, b]\n", "hosts"),
    ("all:\n  hosts:\n    a: just-a-string\n", "a"),
    ("all:\n  vars: [1, 2]\n", "vars"),
    ("all:\n  children: [x]\n", "children"),
])
def test_malformed_inventories_are_refused_in_one_line(tmp_path: Path, text: str, words: str) -> None:
    (tmp_path / "hosts.yml").write_text(text)
    with pytest.raises(InventoryError) as err:
        load_inventory(tmp_path)
    assert str(tmp_path) in str(err.value) and words in str(err.value)
    proc = pdfleet("plan", "-i", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_an_inventory_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_bytes(b"all:\n  hosts:\n    h\xff\xfe: {}\n")
    proc = pdfleet("plan", "-i", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert str(tmp_path) in proc.stderr


def test_a_cluster_model_that_differs_between_hosts_is_refused(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "inv")
    (tmp_path / "inv" / "host_vars").mkdir()
    (tmp_path / "inv" / "host_vars" / "gpu01.yml").write_text("pdfleet_cluster: {profile: mono-tp8}\n")
    (tmp_path / "inv" / "hosts.yml").write_text("all:\n  hosts:\n    gpu01: {}\n    gpu02: {}\n")
    with pytest.raises(InventoryError, match="pdfleet_cluster differs between hosts"):
        load_inventory(tmp_path / "inv").shared_var("pdfleet_cluster")


def test_a_host_without_the_cluster_model_is_named_by_the_preflight(tmp_path: Path) -> None:
    """The preflight checks every host at once (one task): the host that lacks pdfleet_cluster is named, the host
    that has it is not, and nothing is planned."""
    inv = tmp_path / "inv"
    shutil.copytree(EXAMPLE, inv)
    (inv / "group_vars" / "pdfleet_hosts").mkdir()
    (inv / "group_vars" / "all" / "cluster.yml").rename(inv / "group_vars" / "pdfleet_hosts" / "cluster.yml")
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "hosts": {"stray01": {"ansible_host": "127.0.0.4"}},
        "children": {"pdfleet_hosts": {"hosts": {"gpu01": {"ansible_host": "127.0.0.3"}}}}}}))
    out = tmp_path / "show.json"
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), "-e", f"pdfleet_show_out={out}",
                           str(Path(__file__).parent / "show_plan.yml")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0 and not out.exists(), proc.stdout[-3000:]
    assert "stray01: the variable pdfleet_cluster is not defined" in proc.stdout, proc.stdout[-3000:]
    assert "gpu01: the variable" not in proc.stdout and "gpu01, stray01" not in proc.stdout
