"""One scratch sim cluster, converged with site.yml (provisioning included), shared by every provisioning test
and always torn down (hosts, bridge, nft rules and the stand-in repository's server)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pdfleet.paths import REPO_ROOT
from pdfleet.sim.scratch import scratch_inventory

BIN = Path(sys.executable).parent
HERE = Path(__file__).parent
SITE = REPO_ROOT / "site.yml"
PROVISION = HERE / "provision_only.yml"


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the simulated cluster needs root (systemd-nspawn, bridges, nftables)"
    for tool in ("systemd-nspawn", "debootstrap", "nft", "dpkg-deb", "gpg"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make test installs it: scripts/host-packages.sh)"
    return None


@dataclass
class Cluster:
    inventory: Path
    state_dir: Path
    router_url: str

    def playbook(self, playbook: Path = SITE, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, ANSIBLE_NOCOLOR="1")
        # One cascade cycle in the verification play (default 2), to keep the suite short.
        verify = json.dumps({"pdfleet_verify_args": ["--cycles", "1"],
                             "pdfleet_verify_reports_dir": str(self.state_dir.parent / "reports")})
        proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(playbook),
                               "-e", verify, *extra],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{playbook.name} failed (rc {proc.returncode}):\n{proc.stdout[-6000:]}\n"
                                 f"{proc.stderr}")
        return proc

    def ssh(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ssh", "-F", str(self.state_dir / "ssh_config"), "node1", command],
                              capture_output=True, text=True, timeout=timeout, check=False)

    def conformance(self, inventory: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pdfleet.conformance", "conformance", "-i",
                               str(inventory or self.inventory)], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=300, check=False)

    def set_cuda(self, **values: object) -> None:
        path = self.inventory / "group_vars" / "all" / "cluster.yml"
        data = yaml.safe_load(path.read_text())
        data["pdfleet_cluster"].setdefault("cuda", {}).update(values)
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.router_url + "/readiness", timeout=3) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(1)
        raise AssertionError(f"router {self.router_url} not ready within {timeout}s: {last}")


def recap(stdout: str, host: str) -> dict[str, int]:
    for line in stdout.splitlines():
        if line.startswith(host + " ") and "ok=" in line:
            return {k: int(v) for k, v in (w.split("=") for w in line.split()[2:])}
    raise AssertionError(f"no PLAY RECAP line for {host}:\n{stdout[-3000:]}")


@pytest.fixture(scope="session")
def provisioned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("provision")
    scratch = scratch_inventory(root, 80 + (os.getpid() + 10) % 20)  # not tests/sim's subnet (80 + pid % 20)
    plan = json.loads(subprocess.run([str(BIN / "pdfleet"), "plan", "-i", str(scratch.path), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    cluster = Cluster(scratch.path, scratch.state_dir, plan["router_url"])
    try:
        t0 = time.monotonic()
        cluster.playbook()
        cluster.wait_ready()
        print(f"\nprovisioned scratch cluster converged in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        yield cluster
    finally:
        subprocess.run([sys.executable, "-m", "pdfleet.sim.aptrepo", "stop", "--state-dir", str(scratch.state_dir)],
                       capture_output=True, text=True, timeout=60, check=False)
        subprocess.run([str(BIN / "pdfleet"), "sim", "down", "--state-dir", str(scratch.state_dir)],
                       capture_output=True, text=True, timeout=300, check=False)
