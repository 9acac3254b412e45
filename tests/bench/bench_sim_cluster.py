"""Benchmark of the simulated PD cluster end to end, on a scratch copy of inventory/sim (own bridge,
subnet and state dir; torn down at the end): the golden image and CPU runtime (built if missing, else
reported as cached; tests/bench/bench_sim_hosts.py measures a cold golden build), the time from no hosts
to a ready router (the first site.yml run, host creation included), the second (idempotent) converge,
and the memory of each host with its prefill, decode and router running.

Run as root:  .venv/bin/python tests/bench/bench_sim_cluster.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet_sim import DEFAULT_CACHE_DIR
from pdfleet_sim.image import ensure_golden, ensure_runtime, golden_path, runtime_path
from pdfleet_sim.testing.scratch import scratch_inventory

BIN = Path(sys.executable).parent


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def converge(inventory: Path) -> tuple[float, str]:
    t0 = time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), "site.yml"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"site.yml failed:\n{proc.stdout[-4000:]}\n{proc.stderr}")
    recap = [line for line in proc.stdout.splitlines() if line.startswith("node1 ")]
    return time.monotonic() - t0, recap[-1] if recap else "?"


def wait_ready(url: str, timeout: float = 300) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with urllib.request.urlopen(url + "/readiness", timeout=3) as resp:
                if resp.status == 200:
                    return time.monotonic() - t0
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"{url} not ready after {timeout}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the simulated cluster needs systemd-nspawn and a bridge")
    figures: dict[str, object] = {}
    golden = golden_path(DEFAULT_CACHE_DIR)
    figures["golden_cached"] = golden.is_dir()
    t0 = time.monotonic()
    golden = ensure_golden(DEFAULT_CACHE_DIR, log)
    figures["golden_s"] = round(time.monotonic() - t0, 1)
    figures["runtime_cached"] = runtime_path(DEFAULT_CACHE_DIR, golden).is_dir()
    t0 = time.monotonic()
    ensure_runtime(golden, DEFAULT_CACHE_DIR, log)
    figures["runtime_s"] = round(time.monotonic() - t0, 1)
    with tempfile.TemporaryDirectory(prefix="pdfleet-bench-") as tmp:
        scratch = scratch_inventory(Path(tmp), 78 + os.getpid() % 2)  # away from the test suites
        router = plan_inventory(scratch.path).router_url
        try:
            log("first converge (creates the hosts)")
            first, recap1 = converge(scratch.path)
            ready = first + wait_ready(router)
            log("second converge")
            second, recap2 = converge(scratch.path)
            status = json.loads(subprocess.run(
                [str(BIN / "pdfleet"), "sim", "status", "--json", "--state-dir", str(scratch.state_dir)],
                capture_output=True, text=True, check=True).stdout)
            figures |= {"first_converge_s": round(first, 1), "no_hosts_to_ready_router_s": round(ready, 1),
                        "second_converge_s": round(second, 1), "first_recap": recap1, "second_recap": recap2,
                        "memory_mib_per_host": {h["name"]: round((h["memory_bytes"] or 0) / 2**20)
                                                for h in status}}
        finally:
            subprocess.run([str(BIN / "pdfleet"), "sim", "down", "--state-dir", str(scratch.state_dir)],
                           capture_output=True, check=False)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key:28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
