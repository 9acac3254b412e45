"""Provisioning on the shared converged one-host sim (tests/conftest.py): the driver, CUDA and NIXL roles ran for
real against the stand-in repository; conformance (passing, and failing precisely on broken hosts), Secure Boot,
and the reboot decision on a driver pin change. The idempotence and check-mode tests of the whole site.yml are
in tests/sim/test_site.py (one converge for both suites). Tests marked ``mutates`` run last and put back what they
change."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from simcluster import ScratchCluster, recap

from .conftest import PROVISION

pytestmark = [pytest.mark.sim, pytest.mark.slow]

PIN, NEW_PIN = "580.95.05", "580.105.08"
CONN_PATCH = Path(__file__).resolve().parents[2] / "scripts/pdfleet/patches/0.5.15.post1/nixl-conn.patch"


def test_pinning_keeps_the_newer_branch_out(converged: ScratchCluster) -> None:
    policy = converged.ssh("apt-cache policy nvidia-modprobe").stdout
    assert f"Candidate: {PIN}-1" in policy and "590.48.01-1" in policy, policy


def test_conformance_passes(converged: ScratchCluster) -> None:
    proc = converged.conformance()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr


def _wrong_pin_inventory(cluster: ScratchCluster, tmp_path: Path) -> Path:
    inv = tmp_path / "inventory"
    shutil.copytree(cluster.inventory, inv)
    path = inv / "group_vars/all/cluster.yml"
    data = yaml.safe_load(path.read_text())
    data["pdfleet_cluster"].setdefault("cuda", {})["driver_version"] = NEW_PIN
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return inv


HW = "/etc/pdfleet-sim/hardware.json"


def _set_hw(key: str, value: object) -> str:
    """A shell command that sets one key of the simulated hardware (the stand-in nvidia-smi reads it at every call)."""
    code = f"import json; p = {HW!r}; d = json.load(open(p)); d[{key!r}] = {value!r}; json.dump(d, open(p, 'w'))"
    return f"python3 -c {shlex.quote(code)}"


# (break on the host, repair, the message conformance must print)
BREAKS = {
    "unheld-package": ("apt-mark unhold nvidia-smi", "apt-mark hold nvidia-smi",
                       f"node1: package nvidia-smi {PIN}-1 is not held"),
    "stopped-unit": ("systemctl stop pdfleet-decode0", "systemctl start pdfleet-decode0",
                     "node1: pdfleet-decode0 is enabled and inactive"),
    "wrong-gpu-count": ("cp /etc/pdfleet-sim/hardware.json /root/hw.bak && "
                        "sed -i 's/\"gpu_count\": 8/\"gpu_count\": 7/' /etc/pdfleet-sim/hardware.json",
                        "mv /root/hw.bak /etc/pdfleet-sim/hardware.json",
                        "node1: nvidia-smi lists 7 GPUs, expected 8"),
    "gpu-peer-access-off": (f"cp {HW} /root/hw.p2p && {_set_hw('p2p', 'NS')}",
                            f"mv /root/hw.p2p {HW}",
                            "node1: peer read (`nvidia-smi topo -p2p r`) is not OK for 32 of the 32 prefill/decode"),
    "missing-model-file": ("mv /srv/models/DeepSeek-V4-Flash/tokenizer.json /root/tok.bak",
                           "mv /root/tok.bak /srv/models/DeepSeek-V4-Flash/tokenizer.json",
                           "node1: model file /srv/models/DeepSeek-V4-Flash/tokenizer.json is missing"),
}


@pytest.mark.mutates
@pytest.mark.parametrize("name", sorted(BREAKS))
def test_conformance_names_a_broken_host(converged: ScratchCluster, name: str) -> None:
    breaking, repair, message = BREAKS[name]
    assert converged.ssh(breaking).returncode == 0
    try:
        proc = converged.conformance()
    finally:
        assert converged.ssh(repair).returncode == 0
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert message in proc.stdout, proc.stdout[-4000:]
    if name == "stopped-unit":
        converged.wait_ready()


@pytest.mark.mutates
def test_conformance_names_an_unpatched_conn_py(converged: ScratchCluster) -> None:
    conn = converged.ssh("python3 -c \"import json; print(json.load(open('/opt/pdfleet/venv/pdfleet-record.json'))"
                           "['file'])\"").stdout.strip()
    patch = CONN_PATCH.read_text()
    reverse = f"cat > /root/conn.patch <<'EOF'\n{patch}EOF\npatch -R {conn} /root/conn.patch"
    assert converged.ssh(reverse).returncode == 0
    try:
        proc = converged.conformance()
    finally:
        assert converged.ssh(f"patch -N {conn} /root/conn.patch").returncode == 0
    assert proc.returncode == 1
    assert f"node1: {conn} has sha256 ed76c2c2" in proc.stdout, proc.stdout[-4000:]
    assert "the patched file of SGLang 0.5.15.post1" in proc.stdout


def test_conformance_names_a_wrong_driver_version(converged: ScratchCluster, tmp_path: Path) -> None:
    proc = converged.conformance(_wrong_pin_inventory(converged, tmp_path))
    assert proc.returncode == 1
    assert f"node1: the running driver is {PIN}, the pin is {NEW_PIN}" in proc.stdout, proc.stdout[-4000:]
    assert f"node1: package nvidia-smi is at {PIN}-1, not the pinned {NEW_PIN}" in proc.stdout


def _host_state(cluster: ScratchCluster) -> str:
    return cluster.ssh("dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev} ${db:Status-Want}\\n'; "
                       "ls -l --time-style=+%s.%N /etc/apt/sources.list.d /etc/apt/preferences.d /etc/apt/keyrings "
                       "/etc/modprobe.d; md5sum /etc/apt/preferences.d/*; cat /run/pdfleet-sim/nvidia/version").stdout


@pytest.mark.mutates
def test_secure_boot_fails_clearly_and_changes_nothing(converged: ScratchCluster) -> None:
    hw = "/etc/pdfleet-sim/hardware.json"
    converged.ssh(f"cp {hw} /root/hw.sb && sed -i 's/\"secure_boot\": false/\"secure_boot\": true/' {hw}")
    try:
        with converged.model_changed("cuda", driver_version=NEW_PIN):  # a change the role would otherwise make
            before = _host_state(converged)
            proc = converged.playbook(PROVISION, check=False)
            after = _host_state(converged)
    finally:
        converged.ssh(f"mv /root/hw.sb {hw}")
    assert proc.returncode != 0
    assert "node1: Secure Boot is enabled" in proc.stdout, proc.stdout[-4000:]
    assert "Nothing was changed on this host" in proc.stdout and "disable Secure Boot" in proc.stdout
    assert before == after


@pytest.mark.mutates
def test_gpu_peer_access_off_stops_the_nixl_role_before_any_change(converged: ScratchCluster) -> None:
    assert converged.ssh(f"cp {HW} /root/hw.pairs && {_set_hw('p2p_pairs', {'2-6': 'NS'})}").returncode == 0
    try:
        before = _host_state(converged)
        proc = converged.playbook(PROVISION, check=False)
        after = _host_state(converged)
    finally:
        converged.ssh(f"mv /root/hw.pairs {HW}")
    assert proc.returncode != 0
    assert "Check GPU peer read and write between the prefill and decode GPUs" in proc.stdout, proc.stdout[-4000:]
    for word in ("read", "write"):
        assert (f"node1: peer {word} (`nvidia-smi topo -p2p {word[0]}`) is not OK for 2 of the 32 prefill/decode GPU "
                "pairs (prefill GPU0,GPU1,GPU2,GPU3, decode GPU4,GPU5,GPU6,GPU7): NS (Not supported): GPU2->GPU6, "
                "GPU6->GPU2;") in proc.stdout, proc.stdout[-4000:]
    assert "iommu=pt" in proc.stdout and "Nothing was changed on this host" in proc.stdout
    assert recap(proc.stdout, "node1")["changed"] == 0
    assert before == after


def _loads(cluster: ScratchCluster) -> list[str]:
    return cluster.ssh("cat /var/lib/pdfleet-sim/nvidia/loads.log").stdout.splitlines()


@pytest.mark.mutates
def test_driver_pin_change_reboots_exactly_once(converged: ScratchCluster) -> None:
    loads = len(_loads(converged))
    try:
        with converged.model_changed("cuda", driver_version=NEW_PIN):
            refused = converged.playbook(PROVISION, "-e", "nvidia_driver_reboot_allowed=false", check=False)
            assert refused.returncode != 0
            assert (f"node1: reboot required (the loaded kernel module is {PIN}, the installed one {NEW_PIN})"
                    in refused.stdout), refused.stdout[-4000:]
            assert len(_loads(converged)) == loads  # no reboot
            proc = converged.playbook(PROVISION)
            assert _loads(converged)[loads:] == [_loads(converged)[-1]] and NEW_PIN in _loads(converged)[-1]
            assert "TASK [pdfleet.cluster.nvidia_driver : Reboot for the new driver or kernel]" in proc.stdout
            again = converged.playbook(PROVISION)
            assert recap(again.stdout, "node1")["changed"] == 0, again.stdout[-4000:]
            assert len(_loads(converged)) == loads + 1
    finally:
        converged.playbook(PROVISION)  # back to the pin (one more reboot)
        converged.wait_ready()
    assert NEW_PIN not in converged.ssh("nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout
