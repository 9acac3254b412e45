"""The nvidia_driver role's Ubuntu branch on sim hosts that REPORT Ubuntu 22.04 and 24.04 (pdfleet_sim_os), against
the stand-in repository's ubuntu2204/ubuntu2404 paths with Ubuntu's package names, and a host reporting Debian 11
refused before anything changes on it.

What this shows and what it cannot: the hosts are the Debian 12 sim image with Ubuntu's identification files
(pdfleet_sim.distro), so the role's own look takes them for Ubuntu and the whole Ubuntu branch runs (the
repository path, the branch-named packages at revision -0ubuntu1, the pin, the holds of Ubuntu's hold pattern,
the reboot, the GPU check, a second run that changes nothing). apt and dpkg underneath are Debian 12's, the
packages are stand-ins, and Ubuntu's own archive (its kernel headers, its nvidia-driver-580 packages competing with
NVIDIA's) is not there: what only a real Ubuntu host shows stays untested here."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pdfleet.paths import REPO_ROOT
from role_inputs import plan_inputs
from simcluster import BIN, claimed_net, recap, skip_reason

pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.long]

PLAY = Path(__file__).with_name("driver_only.yml")
PORT = 8765
PIN = "580.95.05"
# host: (what it reports, NVIDIA's repository path for it, its address's last byte)
HOSTS = {"jammy": ("ubuntu-22.04", "ubuntu2204", 11), "noble": ("ubuntu-24.04", "ubuntu2404", 12),
         "bullseye": ("debian-11", "debian12", 13)}
UBUNTU = ("jammy", "noble")
# NVIDIA's Ubuntu names of the driver's packages (the role's vars name them; the stand-in repository offers them)
UBUNTU_PACKAGES = ("nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-kernel-common-580", "nvidia-utils-580",
                   "nvidia-compute-utils-580", "libnvidia-compute-580", "nvidia-modprobe", "nvidia-persistenced")


@dataclass
class DistroCluster:
    inventory: Path
    state_dir: Path

    def ssh(self, host: str, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ssh", "-F", str(self.state_dir / "ssh_config"), host, command],
                              capture_output=True, text=True, timeout=120, check=False)

    def play(self, *extra: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, ANSIBLE_NOCOLOR="1")
        return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(PLAY), *extra],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)


def _inventory(root: Path, net: int) -> tuple[Path, Path]:
    inv, state = root / "inventory", root / "state"
    (inv / "group_vars" / "all").mkdir(parents=True)
    gateway = f"10.{net}.0.1"
    # the sim inventory's provisioning settings (stand-in firmware, modinfo, reboots allowed), as they are
    (inv / "group_vars" / "all" / "provision.yml").write_text(
        (REPO_ROOT / "inventory/sim/group_vars/all/provision.yml").read_text())
    (inv / "group_vars" / "all" / "sim.yml").write_text(yaml.safe_dump({
        "pdfleet_sim": {"bridge": f"pdfsc{net}", "cidr": f"10.{net}.0.0/24", "gateway": gateway,
                        "state_dir": str(state), "with_runtime": False},
        "ansible_user": "root", "ansible_ssh_common_args": f"-F {state / 'ssh_config'}",
        "ansible_python_interpreter": "/usr/bin/python3"}))
    hosts = {name: {"ansible_host": f"10.{net}.0.{last}", "pdfleet_sim_os": os_name,
                    "nvidia_driver_cuda_repo_url": f"http://{gateway}:{PORT}/{path}/x86_64"}
             for name, (os_name, path, last) in HOSTS.items()}
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": plan_inputs("nvidia_driver"), "hosts": hosts}},
                                                   sort_keys=False))
    return inv, state


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DistroCluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("distributions")
    with claimed_net() as net:
        inv, state = _inventory(root, net)
        try:
            up = subprocess.run([str(BIN / "pdfleet"), "sim", "up", "-i", str(inv), "--serve-repo", str(PORT)],
                                capture_output=True, text=True, timeout=1200, check=False)
            assert up.returncode == 0, up.stdout + up.stderr
            found = DistroCluster(inv, state)
            for host in HOSTS:  # the stand-in firmware's mokutil, as the sim play installs it
                got = found.ssh(host, "mkdir -p /usr/lib/pdfleet-sim/hardware && curl -fsS -o "
                                      "/usr/lib/pdfleet-sim/hardware/mokutil "
                                      f"http://10.{net}.0.1:{PORT}/sim-hardware/mokutil && "
                                      "chmod 755 /usr/lib/pdfleet-sim/hardware/mokutil")
                assert got.returncode == 0, got.stderr
            yield found
        finally:
            subprocess.run([str(BIN / "pdfleet"), "sim", "down", "--state-dir", str(state)],
                           capture_output=True, text=True, timeout=300, check=False)


def _state(cluster: DistroCluster, host: str) -> str:
    return cluster.ssh(host, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev} ${db:Status-Want}\\n'; "
                             "ls -la --time-style=+%s.%N /etc/apt/sources.list.d /etc/apt/preferences.d "
                             "/etc/apt/keyrings /etc/modprobe.d 2>&1").stdout


def test_ubuntu_hosts_converge_and_debian_11_is_refused(cluster: DistroCluster) -> None:
    reported = {h: cluster.ssh(h, ". /etc/os-release && echo $ID $VERSION_ID").stdout.strip() for h in HOSTS}
    assert reported == {"jammy": "ubuntu 22.04", "noble": "ubuntu 24.04", "bullseye": "debian 11"}
    before = _state(cluster, "bullseye")
    proc = cluster.play()
    assert proc.returncode != 0  # the refused host
    out = proc.stdout
    for host in UBUNTU:
        assert recap(out, host)["failed"] == 0, out[-6000:]
    assert recap(out, "bullseye")["failed"] == 1 and recap(out, "bullseye")["changed"] == 0, out[-6000:]
    assert ("bullseye: Debian 11.11 (OS family Debian) is not a distribution this role installs the driver on "
            "(Debian 12, Ubuntu 22.04, Ubuntu 24.04" in " ".join(out.split())), out[-6000:]
    assert _state(cluster, "bullseye") == before  # nothing changed on it

    for host in UBUNTU:
        _os_name, path, _ = HOSTS[host]
        source = cluster.ssh(host, "cat /etc/apt/sources.list.d/pdfleet-cuda.sources").stdout
        assert f"/{path}/x86_64/" in source, source
        rows = dict(line.split(" ", 1) for line in cluster.ssh(
            host, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Want}\\n' 'nvidia-*' 'libnvidia-*' 'libcuda*'"
        ).stdout.splitlines() if " " in line)
        installed = {name: state for name, state in rows.items() if not state.startswith(" ")}
        assert {name: installed.get(name) for name in UBUNTU_PACKAGES} == {
            name: f"{PIN}-0ubuntu1 hold" for name in UBUNTU_PACKAGES}, rows
        assert not {"nvidia-open", "nvidia-smi", "libcuda1", "nvidia-kernel-open-dkms"} & set(installed), installed
        policy = cluster.ssh(host, "apt-cache policy nvidia-modprobe").stdout
        assert f"Candidate: {PIN}-0ubuntu1" in policy and "590.48.01-0ubuntu1" in policy, policy
        smi = cluster.ssh(host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split()
        assert smi == [PIN] * 8, smi

    again = cluster.play("--limit", ",".join(UBUNTU))
    assert again.returncode == 0, again.stdout[-6000:]
    for host in UBUNTU:
        assert recap(again.stdout, host)["changed"] == 0, again.stdout[-6000:]
