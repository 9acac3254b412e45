"""Benchmark of the simulated hosts: golden image build (cold and cached), the heavy runtime (cached, or
cold with --runtime-cold), time from no hosts to SSH-ready for N hosts, and memory per idle host.

Run as root:  .venv/bin/python tests/bench/bench_sim_hosts.py [--hosts 3] [--no-cold] [--runtime-cold] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pdfleet_sim import DEFAULT_CACHE_DIR, SimHost, SimNetwork, down, ssh, status, up
from pdfleet_sim.image import ensure_golden, ensure_runtime, golden_path, runtime_path
from pdfleet_sim.system import safe_rmtree


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.monotonic()
    result = fn(*args, **kwargs)
    return time.monotonic() - t0, result


def du(path: Path) -> int:
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--no-cold", dest="cold", action="store_false", help="skip the cold image build")
    parser.add_argument("--runtime-cold", action="store_true", help="also build the runtime cold (minutes)")
    parser.add_argument("--with-runtime", action="store_true", help="boot the hosts with the runtime mounted")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("the sim benchmark needs root", file=sys.stderr)
        return 2
    figures: dict[str, float | int | str] = {}

    if args.cold or args.runtime_cold:
        scratch = Path(tempfile.mkdtemp(prefix="bench-", dir=args.cache_dir.parent))
        try:
            t, golden = timed(ensure_golden, scratch, log)
            figures["golden_cold_s"] = round(t, 1)
            figures["golden_size_mib"] = round(du(golden) / 2**20)
            if args.runtime_cold:
                t, runtime = timed(ensure_runtime, golden, scratch, log)
                figures["runtime_cold_s"] = round(t, 1)
                figures["runtime_size_gib"] = round(du(runtime) / 2**30, 2)
        finally:
            safe_rmtree(scratch)

    t, golden = timed(ensure_golden, args.cache_dir, log)
    figures["golden_cached_s"] = round(t, 3)
    figures["golden_image"] = str(golden)
    if args.with_runtime:
        t, _ = timed(ensure_runtime, golden, args.cache_dir, log)
        figures["runtime_cached_s"] = round(t, 3)
    elif runtime_path(args.cache_dir, golden_path(args.cache_dir)).is_dir():
        figures["runtime_cached"] = "present"

    state_dir = Path(tempfile.mkdtemp(prefix="pdfleet-sim-bench-"))
    n = os.getpid() % 200 + 20
    network = SimNetwork(f"pdfb{os.getpid() % 100000}", f"10.79.{n}.0/24", f"10.79.{n}.1")
    hosts = [SimHost(f"bench{i}", f"10.79.{n}.{10 + i}") for i in range(1, args.hosts + 1)]
    try:
        t, _ = timed(up, hosts, network, state_dir=state_dir, progress=log, with_runtime=args.with_runtime)
        figures[f"up_{args.hosts}_hosts_to_ssh_ready_s"] = round(t, 2)
        t, _ = timed(up, hosts, network, state_dir=state_dir, progress=log, with_runtime=args.with_runtime)
        figures["up_again_noop_s"] = round(t, 2)
        t0 = time.monotonic()
        for h in hosts:
            ssh(state_dir, h.name, "true")
        figures["ssh_round_trip_ms"] = round((time.monotonic() - t0) / len(hosts) * 1000)
        time.sleep(5)  # let the hosts settle to idle
        mems = [s.memory_bytes or 0 for s in status(state_dir)]
        figures["idle_host_pss_mib_avg"] = round(sum(mems) / len(mems) / 2**20, 1)
        figures["idle_host_pss_mib_max"] = round(max(mems) / 2**20, 1)
        overlay = [du(state_dir / "hosts" / h.name / "upper") for h in hosts]
        figures["overlay_upper_mib_avg"] = round(sum(overlay) / len(overlay) / 2**20, 1)
    finally:
        t, _ = timed(down, state_dir, log)
        figures[f"down_{args.hosts}_hosts_s"] = round(t, 2)
        shutil.rmtree(state_dir, ignore_errors=True)

    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        width = max(len(k) for k in figures)
        for key, value in figures.items():
            print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
