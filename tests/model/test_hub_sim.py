"""The hub download on a simulated host (systemd, journald, sshd; the role over SSH as on a real host): the
pinned `hf download` in a venv on the host against the test hub endpoint on the host's bridge address. The
token is in no output at -vvvv, on no command line on the host while the download runs (`ps` read over SSH
while the endpoint holds a file), not in the CLI's environment, and not in the host's journal, which does hold
the role's module runs; a wrong token fails clearly there too. One host for the module (seconds to boot)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT
from pdfleet_sim import SimCluster, SimHost, SimNetwork, down, up
from role_inputs import plan_inputs
from simcluster import BIN, claimed_net, skip_reason

from .hfcli import pinned_hub_requirements, sim_inventory_sglang
from .hubserver import HubRepo, HubServer, serve
from .test_hub import BIG, MIB, REPO_ID, TOKEN, _repo_files

PLAYBOOK = Path(__file__).parent / "stage_host.yml"
VENV = "/opt/pdfleet-hubtest/venv"  # the host's stand-in for the service venv: only huggingface_hub in it
MODEL = "/srv/models/DeepSeek-V4-Flash"
HUB_PIN = pinned_hub_requirements()[sim_inventory_sglang()]

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimCluster, SimHost]]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    state_dir = tmp_path_factory.mktemp("hubsim") / "state"
    with claimed_net() as net:
        network = SimNetwork(bridge=f"pdfsc{net}", cidr=f"10.{net}.0.0/24", gateway=f"10.{net}.0.1")
        node = SimHost("hubt1", f"10.{net}.0.10")
        try:
            cluster = up([node], network, state_dir=state_dir, with_runtime=False)
            venv = ssh(cluster, f"python3 -m venv {VENV} && {VENV}/bin/pip install --quiet --no-input '{HUB_PIN}'",
                       timeout=900)
            assert venv.returncode == 0, venv.stderr[-3000:]
            yield cluster, node
        finally:
            down(state_dir)


def ssh(cluster: SimCluster, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-F", str(cluster.ssh_config), "-o", "BatchMode=yes", "hubt1", command],
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def hub(host: tuple[SimCluster, SimHost], tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    root = tmp_path_factory.mktemp("hubrepo")
    _repo_files(root)
    with serve(HubRepo(root, REPO_ID, TOKEN), address=host[0].network.gateway) as server:
        yield server


def run_role(host: tuple[SimCluster, SimHost], hub: HubServer, tmp: Path, token: str) -> tuple[int, str]:
    cluster, node = host
    inventory = tmp / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {node.name: cluster.ansible_host_vars(node)}}}))
    evars = {**plan_inputs("model"), "model_path": MODEL, "model_source": "hub", "model_hub_repo": REPO_ID,
             "model_hf_cli": f"{VENV}/bin/hf",
             "model_hub_endpoint": hub.url, "model_hf_token": token, "model_hub_poll_s": 1,
             "model_hub_revision": "main"}  # the test hub's branch (the examples' plan pins a commit it lacks)
    secrets = tmp / "secrets.json"
    secrets.write_text(json.dumps(evars))
    secrets.chmod(0o600)
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([str(BIN / "ansible-playbook"), str(PLAYBOOK), "-i", str(inventory), "-e", f"@{secrets}",
                           "-vvvv"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=False, env=env)
    secrets.unlink()
    return proc.returncode, proc.stdout + proc.stderr


def journal(cluster: SimCluster) -> str:
    out = ssh(cluster, "journalctl --no-pager -o verbose")
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_download_on_a_host_leaves_the_token_nowhere(host: tuple[SimCluster, SimHost], hub: HubServer,
                                                      tmp_path: Path) -> None:
    cluster, _ = host
    hold = hub.hold(BIG, after=MIB)
    seen: dict[str, str] = {}

    def look() -> None:
        if hold.arrived.wait(600):
            seen["ps"] = ssh(cluster, "ps -eww -o pid=,args=").stdout
            pids = [ln.split()[0] for ln in seen["ps"].splitlines() if " download " + REPO_ID in ln]
            seen["environ"] = ssh(cluster, " ".join(f"cat /proc/{p}/environ;" for p in pids) or "true").stdout
            seen["dirs"] = ssh(cluster, "stat -c '%a %n' /tmp/*.pdfleet-hub /tmp/*.pdfleet-hub/token").stdout
        hold.release.set()

    t = threading.Thread(target=look)
    t.start()
    rc, out = run_role(host, hub, tmp_path, TOKEN)
    t.join()
    assert rc == 0, out[-5000:]
    assert TOKEN not in out
    assert " download " + REPO_ID in seen["ps"], "ps was not read on the host while hf download ran"
    assert TOKEN not in seen["ps"]
    assert "HF_TOKEN_PATH=" in seen["environ"] and TOKEN not in seen["environ"]
    assert re.search(r"^700 /tmp/\S+\.pdfleet-hub$", seen["dirs"], re.M)
    assert re.search(r"^600 /tmp/\S+\.pdfleet-hub/token$", seen["dirs"], re.M)
    assert ssh(cluster, "ls -d /tmp/*.pdfleet-hub").returncode != 0, "the private token directory was left"
    sums = ssh(cluster, f"cd {MODEL} && sha256sum " + " ".join(hub.repo.files())).stdout
    assert dict(reversed(line.split()) for line in sums.splitlines()) == {
        rel: hashlib.sha256(p.read_bytes()).hexdigest() for rel, p in hub.repo.files().items()}
    log = journal(cluster)
    assert "ansible-ansible.builtin.command" in log or "Invoked with" in log, "the journal holds no module runs"
    assert TOKEN not in log


def test_wrong_token_fails_clearly_on_a_host(host: tuple[SimCluster, SimHost], hub: HubServer,
                                             tmp_path: Path) -> None:
    cluster, node = host
    ssh(cluster, f"rm -rf {MODEL}")
    bad = "hf_WRONG_on_the_host_must_not_leak_7"
    rc, out = run_role(host, hub, tmp_path, bad)
    assert rc != 0
    assert bad not in out
    assert f"host {node.name}: {hub.url} refused the token for {REPO_ID}@main (401 Unauthorized)" in out
    assert bad not in journal(cluster)
