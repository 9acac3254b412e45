"""A throwaway simulated cluster for the integration tests: its own inventory, bridge, subnet and state
directory (so it never touches a cluster a person started with `make site`), converged by the real
site.yml, and always torn down, also when a test fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the simulated cluster needs root (systemd-nspawn, bridges, nftables)"
    for tool in ("systemd-nspawn", "debootstrap", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make test installs it: scripts/host-packages.sh)"
    return None


@dataclass
class SimCluster:
    inventory: Path
    state_dir: Path
    address: str
    router_url: str
    model: str
    reports_dir: Path

    def latest_report(self) -> dict:
        """The newest verification report the final play of site.yml left."""
        reports = sorted(self.reports_dir.glob("verify-*.json"), key=lambda p: p.stat().st_mtime)
        assert reports, f"no verification report in {self.reports_dir}"
        return json.loads(reports[-1].read_text())

    def playbook(self, *extra: str, playbook: str = "site.yml", check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a playbook; the verification play runs one cascade cycle (default 2) to keep the suite short."""
        env = dict(os.environ, ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
        verify_args = json.dumps({"pdfleet_verify_args": ["--cycles", "1"],
                                  "pdfleet_verify_reports_dir": str(self.reports_dir)})
        proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(self.inventory), playbook,
                               "-e", verify_args, *extra],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{playbook} failed (rc {proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr}")
        return proc

    def ssh(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ssh", "-F", str(self.state_dir / "ssh_config"), "node1", command],
                              capture_output=True, text=True, timeout=timeout, check=False)

    def chat(self, prompt: str, timeout: float = 30) -> dict:
        """One non-streaming chat completion through the router; raises on HTTP errors and time-outs."""
        body = json.dumps({"model": self.model, "max_tokens": 16,
                           "messages": [{"role": "user", "content": prompt}]}).encode()
        req = urllib.request.Request(self.router_url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            assert resp.status == 200
            return json.loads(resp.read())

    def health(self, url: str) -> tuple[int, float]:
        """(status, seconds) of GET url/health."""
        t0 = time.monotonic()
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return resp.status, time.monotonic() - t0

    def set_patched(self, patched: bool) -> None:
        """The explicit inventory switch: pdfleet_cluster.sglang.apply_patch."""
        path = self.inventory / "group_vars" / "all" / "cluster.yml"
        data = yaml.safe_load(path.read_text())
        data["pdfleet_cluster"]["sglang"]["apply_patch"] = patched
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
    """The PLAY RECAP counters of one host."""
    for line in stdout.splitlines():
        if line.startswith(host + " ") and "ok=" in line:
            return {k: int(v) for k, v in (w.split("=") for w in line.split()[2:])}
    raise AssertionError(f"no PLAY RECAP line for {host}:\n{stdout[-3000:]}")


@pytest.fixture(scope="session")
def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("simcluster")
    scratch = scratch_inventory(root, 80 + os.getpid() % 20)
    inventory, state_dir, address = scratch.path, scratch.state_dir, scratch.addresses["node1"]
    plan = json.loads(subprocess.run([str(BIN / "pdfleet"), "plan", "-i", str(inventory), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    cluster = SimCluster(inventory, state_dir, address, plan["router_url"],
                         plan["model"]["served_name"] or plan["model"]["name"], root / "reports")
    try:
        yield cluster
    finally:
        subprocess.run([str(BIN / "pdfleet"), "sim", "down", "--state-dir", str(state_dir)],
                       capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="session")
def converged(sim_cluster: SimCluster) -> SimCluster:
    """The scratch cluster converged by site.yml with the patch applied (its verification play passed)."""
    sim_cluster.set_patched(True)
    sim_cluster.playbook()
    sim_cluster.wait_ready()
    return sim_cluster
