"""The driver role's choice by distribution and release, cheaply: the role runs against this machine as five
"hosts", each of whose look sees the identification files a sim host reporting that distribution gets
(pdfleet_sim.distro.REPORTED), bind-mounted in a private mount namespace around the host's Python (unshare), so
nothing on this machine changes. Every host also fails the control-machine check, so the role stops at its checks
before a change on all of them; what is checked here is what its look picked and what the checks name.
The role's Ubuntu branch converging on sim hosts that report Ubuntu: test_distributions.py (long)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT
from pdfleet_sim import distro
from role_inputs import plan_inputs

BIN = Path(sys.executable).parent
URL = "http://mirror.invalid/cuda/repos/{}/x86_64"
# host: (what it reports, its repository URL)
HOSTS = {"bookworm": ("debian-12", URL.format("debian12")), "jammy": ("ubuntu-22.04", URL.format("debian12")),
         "noble": ("ubuntu-24.04", ""), "bullseye": ("debian-11", URL.format("debian12")),
         "fedora": ("fedora-41", URL.format("debian12"))}
SUPPORTED = "(Debian 12, Ubuntu 22.04, Ubuntu 24.04: the releases NVIDIA's CUDA repository has the driver for)"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None
                                or not Path("/etc/machine-id").is_file(),
                                reason="needs root and unshare (a private mount namespace), and /etc/machine-id")


def _interpreter(tmp_path: Path, os_name: str) -> Path:
    """A Python that sees this machine with the identification files of `os_name` (only those the look reads)."""
    mounts = []
    for rel in ("etc/os-release", "etc/debian_version"):
        if rel in distro.REPORTED[os_name]:
            src = tmp_path / os_name / Path(rel).name
            src.parent.mkdir(parents=True, exist_ok=True)
            src.write_text(distro.REPORTED[os_name][rel])
            mounts.append(f"mount --bind {src} /{rel} && ")
    wrapper = tmp_path / f"python-{os_name}"
    wrapper.write_text("#!/bin/sh\nexec unshare --mount --propagation private sh -c "
                       f"'{''.join(mounts)}exec \"$0\" \"$@\"' {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def _results(stdout: str, task: str) -> dict[str, dict]:
    """Each host's result of `task` (ANSIBLE_CALLBACK_RESULT_FORMAT=json, -v: one JSON line per host)."""
    out, lines = {}, stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"TASK [{task}]"))
    for line in lines[start + 1:]:
        if line.startswith("TASK ["):
            break
        if line.startswith(("ok: [", "fatal: [")) and " => {" in line:
            out[line.split("[", 1)[1].split("]", 1)[0]] = json.loads(line.split(" => ", 1)[1])
    return out


def test_the_probe_picks_the_reported_release_and_the_checks_refuse_the_rest(tmp_path: Path) -> None:
    inventory = {"all": {"vars": plan_inputs("nvidia_driver"), "hosts": {
        name: {"ansible_connection": "local", "ansible_python_interpreter": str(_interpreter(tmp_path, os_name)),
               "nvidia_driver_cuda_repo_url": url}
        for name, (os_name, url) in HOSTS.items()}}}
    (tmp_path / "hosts.json").write_text(json.dumps(inventory))
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent("""\
        - name: The driver role's look and checks, each host with another distribution's identification
          hosts: all
          gather_facts: false
          roles:
            - role: pdfleet.cluster.nvidia_driver
              vars:
                nvidia_driver_check_gpus: false
        """))
    env = dict(os.environ, ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-v", "-i", str(tmp_path / "hosts.json"), str(play)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout
    assert proc.returncode != 0 and all(f"{h} " in out and "changed=0" in out for h in HOSTS), out[-4000:]
    probes = {h: r["probe"] for h, r in _results(out, "pdfleet.cluster.nvidia_driver : Probe the host (packages, "
                                                     "files, signing key, kernel module, GPUs)").items()}
    picked = {h: (p["os"]["distribution"], p["entry"], p["release"], p["repo_distro"]) for h, p in probes.items()}
    assert picked == {"bookworm": ("Debian", "Debian", "12", "debian12"),
                      "jammy": ("Ubuntu", "Ubuntu", "22.04", "ubuntu2204"),
                      "noble": ("Ubuntu", "Ubuntu", "24.04", "ubuntu2404"),
                      "bullseye": ("Debian", "", "", ""), "fedora": ("Fedora Linux", "", "", "")}, picked
    # Ubuntu's branch-named packages and hold pattern (constants.yml), Debian's names for Debian 12
    assert probes["jammy"]["dist"]["packages"][:2] == ["nvidia-driver-580-open", "nvidia-dkms-580-open"]
    assert probes["jammy"]["dist"]["package_revision"] == "-0ubuntu1"
    assert probes["noble"]["dist"]["hold_regex"] == "^(nvidia-.*|libnvidia-.*)$"
    assert probes["bookworm"]["dist"]["packages"][0] == "nvidia-open"
    assert probes["bullseye"]["dist"]["packages"] == [] and probes["bullseye"]["packages"] == {}

    checks = {h: " ".join(r["msg"].split()) for h, r in _results(out, "pdfleet.cluster.nvidia_driver : Check the "
                                                                       "inputs and the host before changing "
                                                                       "anything").items()}
    assert set(checks) == set(HOSTS)
    for host in HOSTS:
        assert f"{host} is the control machine running this playbook" in checks[host]
    assert "is not a distribution" not in checks["bookworm"] and "repository for" not in checks["bookworm"]
    assert (f"jammy: nvidia_driver_cuda_repo_url {URL.format('debian12')} is NVIDIA's repository for debian12, but "
            "this host runs Ubuntu 22.04, whose packages are under .../ubuntu2204/x86_64." in checks["jammy"])
    assert ("noble: nvidia_driver_cuda_repo_url is not set. Set it in the inventory to NVIDIA's CUDA repository for "
            "this host (ubuntu2404: the .../compute/cuda/repos/ubuntu2404/x86_64 directory" in checks["noble"])
    assert (f"bullseye: Debian 11.11 (OS family Debian) is not a distribution this role installs the driver on "
            f"{SUPPORTED}. Nothing was changed." in checks["bullseye"])
    assert (f"fedora: Fedora Linux 41 (OS family Fedora Linux) is not a distribution this role installs the driver "
            f"on {SUPPORTED}. Nothing was changed." in checks["fedora"])
    # an unsupported host is not also told about a repository path it has none of
    assert "repository for debian12" not in checks["bullseye"] + checks["fedora"]
