"""Scratch clusters for the rollout tests: one host (inventory/sim) and the fleet (inventory/sim-fleet), staged
pristine (apply_patch: false) with `site.yml --skip-tags verify`. PDFLEET_TEST_ROLLOUT_CLUSTER=<dir with
info.json> reuses a scratch cluster started by hand (then it is not torn down here)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pdfleet.paths import REPO_ROOT
from simcluster import BIN, SITE, ScratchCluster, scratch_cluster, skip_reason

ROLLOUT = REPO_ROOT / "rollout.yml"


@dataclass
class Run:
    rc: int
    stdout: str
    seconds: float
    report: dict[str, Any] | None

    def recap(self) -> dict[str, dict[str, int]]:
        out = {}
        for line in self.stdout.split("PLAY RECAP", 1)[-1].splitlines():
            if "ok=" in line and ":" in line:
                host = line.split()[0]
                out[host] = {k: int(v) for k, v in (w.split("=") for w in line.split()[2:])}
        return out


def rollout(c: ScratchCluster, *extra: str, timeout: float = 3600) -> Run:
    """Run rollout.yml on the cluster; its report lands in the cluster's reports dir."""
    reports = c.reports_dir / f"rollout-run-{time.time():.0f}"
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    t0 = time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(c.inventory), str(ROLLOUT),
                           "-e", f"pdfleet_rollout_reports_dir={reports}", *extra], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    found = sorted(reports.glob("rollout-*/rollout.json"))
    report = json.loads(found[-1].read_text()) if found else None
    return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0, report)


def _staged(root: Path, source: Path) -> Iterator[ScratchCluster]:
    reuse = os.environ.get("PDFLEET_TEST_ROLLOUT_CLUSTER")
    if reuse:
        info = json.loads((Path(reuse) / "info.json").read_text())
        inv = Path(info["inventory"])
        c = ScratchCluster(inv, Path(info["state"]), "", info["router"], info["model"], Path(reuse) / "reports")
        c.wait_ready()
        yield c
        return
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with scratch_cluster(root, source=source) as c:
        c.set_model("sglang", apply_patch=False)
        c.playbook(SITE, "--skip-tags", "verify")  # item 7: a fleet staged in a known state, no final play
        c.wait_ready()
        yield c


@pytest.fixture(scope="module")
def one_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    yield from _staged(tmp_path_factory.mktemp("rollout1"), REPO_ROOT / "inventory" / "sim")


@pytest.fixture(scope="module")
def sim_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    yield from _staged(tmp_path_factory.mktemp("rolloutfleet"), REPO_ROOT / "inventory" / "sim-fleet")
