"""`sglang_install_mode: pypi` (what a real GPU host gets) on a sim host: the sglang role installs the pinned
SGLang with all its dependencies from the package index into the service venv, from the release's hash lock with
pip --require-hashes (CUDA torch, NVIDIA's CUDA libraries and NIXL included, several GB): the venv then holds every
requirement of the lock at its version; it patches conn.py and writes the record; a second run changes nothing.
Prints the time and the venv's size. The sim host reaches the index through the sim bridge's masquerade and has
this machine's pip configuration (its local indexes bind-mounted); nothing is imported (no GPU), so this shows the
install path and the patch, not that SGLang runs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible_plugins.probes import load_common
from pdfleet.paths import REPO_ROOT
from pdfleet.versions import CONSTANTS
from role_inputs import plan_inputs
from simcluster import BIN, claimed_net, recap, skip_reason

pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.long]

PLAY = Path(__file__).with_name("sglang_only.yml")
VERSION = "0.5.15.post1"
VENV = "/opt/pdfleet/venv"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("pypi")
    inv, state = root / "inventory", root / "state"
    inv.mkdir()
    with claimed_net() as net:
        (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {
            "vars": {"pdfleet_sim": {"bridge": f"pdfsc{net}", "cidr": f"10.{net}.0.0/24", "gateway": f"10.{net}.0.1",
                                     "state_dir": str(state), "with_runtime": False},
                     "ansible_user": "root", "ansible_ssh_common_args": f"-F {state / 'ssh_config'}",
                     "ansible_python_interpreter": "/usr/bin/python3",
                     **plan_inputs("sglang", VERSION), "sglang_install_mode": "pypi"},
            "hosts": {"gpuhost": {"ansible_host": f"10.{net}.0.11"}}}}))
        try:
            up = subprocess.run([str(BIN / "pdfleet"), "sim", "up", "-i", str(inv)], capture_output=True, text=True,
                                timeout=1200, check=False)
            assert up.returncode == 0, up.stdout + up.stderr
            yield inv, state
        finally:
            subprocess.run([str(BIN / "pdfleet"), "sim", "down", "--state-dir", str(state)],
                           capture_output=True, text=True, timeout=300, check=False)


def _play(inv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv / "hosts.yml"), str(PLAY)], cwd=REPO_ROOT,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1"), capture_output=True, text=True, timeout=5400,
                          check=False)


def test_pypi_mode_installs_the_stack_then_patches_and_records(host: tuple[Path, Path]) -> None:
    inv, state = host

    def ssh(command: str) -> str:
        return subprocess.run(["ssh", "-F", str(state / "ssh_config"), "gpuhost", command], capture_output=True,
                              text=True, timeout=300, check=False).stdout

    t0 = time.monotonic()
    proc = _play(inv)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    size = ssh(f"du -sm {VENV} | cut -f1").strip()
    print(f"\npypi install of SGLang {VERSION} from its hash lock: {took:.0f} s, venv {size} MiB", file=sys.stderr)
    dists = ssh(f"{VENV}/bin/python -m pip list --format json")
    versions = {d["name"].lower(): d["version"] for d in json.loads(dists)}
    assert versions["sglang"] == VERSION
    # the venv is the lock: every requirement for the host's Python at its version (NIXL's too), nothing floated
    lock = (REPO_ROOT / "ansible" / "roles" / "sglang" / "files" / "service" / f"sglang-{VERSION}.lock").read_text()
    names = {k.replace("_", "-").replace(".", "-"): v for k, v in versions.items()}
    assert load_common().lock_missing(lock, "3.11", {f"{k}=={v}" for k, v in names.items()}) == [], names
    assert names["nixl"] == CONSTANTS["pins"]["nixl_version"]
    assert CONSTANTS["pins"]["sglang_router_package"] not in names  # the gateway has a venv of its own
    assert "torch" in versions and "+cpu" not in versions["torch"], versions.get("torch")  # the index's CUDA build
    assert ssh(f"sha256sum {VENV}/pdfleet-service.lock").split()[:1] == [hashlib.sha256(lock.encode()).hexdigest()]
    record = json.loads(ssh(f"cat {VENV}/{CONSTANTS['record_name']}"))
    assert record["version"] == VERSION and record["install_mode"] == "pypi" and record["patched"] is True, record
    again = _play(inv)
    assert recap(again.stdout, "gpuhost")["changed"] == 0, again.stdout[-4000:]
