"""Benchmark of `pdfleet verify` against a LocalPD on 127.0.0.1 (simulated prefill + decode, real router).

1. The protocol's wall time, and how much of it lies beyond the configured kill windows (the overhead of
   the config gate, liveness, opening/killing, settle, recovery, benchmark and log scan).
2. How many concurrent streaming sessions one control-machine core opens and kills (60, 250, 1000 by
   default): time until every request is on the wire, time to drop them all, and the client's CPU time.

Run:  .venv/bin/python tests/bench/bench_verify.py [--light] [--sizes 60,250,1000] [--window 5] [--json]
(--light uses the KV stand-in instead of SGLang 0.5.15.post1's real conn.py from the heavy runtime.)
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pdfleet.verify.cascade import run_cycle
from pdfleet.verify.checks import wait_idle
from pdfleet.verify.logs import FileLogs
from pdfleet.verify.protocol import run_protocol
from pdfleet.verify.settings import Settings
from pdfleet.verify.targets import from_urls
from pdfleet_sim.paths import import_path
from pdfleet_sim.testing.localpd import REPO_ROOT, LocalPD, RouterSpec, free_port
from pdfleet_sim.testing.realwedge import runtime_pd_env


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def start_pd(light: bool, log_dir: Path) -> LocalPD:
    router = RouterSpec.find("sglang-router") or RouterSpec.find("smg")
    if router is None:
        raise SystemExit("no router installed (.cache/router-sgl or .cache/router-smg)")
    if light:
        python = str(REPO_ROOT / ".cache/simdev/bin/python")
        env = {"PYTHONPATH": import_path(), "PDFLEET_SIM_KV_BACKEND": "fake", "PYTHONUNBUFFERED": "1"}
    else:
        from pdfleet.patch.runtime import Runtime, default_root

        rt = Runtime(default_root())
        if not rt.is_ready("0.5.15.post1"):
            raise SystemExit("the 0.5.15.post1 runtime is not built; use --light")
        python = str(rt.python)
        env = runtime_pd_env(rt, True, "0.5.15.post1")
    args = ["--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1"]
    return LocalPD([python], log_dir, env, router, router_args=args,
                   worker_args=["--max-running-requests", "2048"]).start()


def protocol_wall(pd: LocalPD, window: float, cycles: int, concurrency: int) -> dict[str, Any]:
    target = from_urls(pd.router_url, [pd.prefill_url], [pd.decode_url], model=pd.model)
    s = Settings(cycles=cycles, concurrency=concurrency, window_s=window,
                 bench_requests=16, bench_concurrency=4, bench_max_tokens=32,
                 baseline_file=pd.log_dir / "baselines.json")
    logs = FileLogs({"prefill": pd.log_dir / "prefill.log", "decode": pd.log_dir / "decode.log"})
    report = asyncio.run(run_protocol(target, s, logs, out=io.StringIO()))
    t = report.timings
    return {"verdict": report.verdict, "logs": report.check("logs").summary if report.check("logs") else None,
            "wall_s": t["wall_s"], "kill_windows_s": t["kill_windows_s"],
            "beyond_kill_windows_s": t["beyond_kill_windows_s"], "checks_s": t["checks_s"],
            "pauses_and_settle_s": s.pause_s * (cycles - 1) + s.settle_s}


def sessions_per_core(pd: LocalPD, n: int, window: float) -> dict[str, Any]:
    s = Settings(concurrency=n, window_s=window, cascade_prompt_words=50, cascade_max_tokens=4096,
                 progress_interval_s=3600, idle_deadline_s=60)

    async def go() -> dict[str, Any]:
        c0, t0 = cpu_s(), time.monotonic()
        stats = await run_cycle(pd.router_url + "/v1/chat/completions", pd.model, s, 1, random.Random(1),
                                io.StringIO())
        cpu = cpu_s() - c0
        wall = time.monotonic() - t0
        idle = await wait_idle(from_urls(pd.router_url, [pd.prefill_url], [pd.decode_url]), s)
        return {"sessions": n, "opened": stats.opened, "answered": stats.answered,
                "first_token": stats.first_token, "killed": stats.killed,
                "all_sent_s": round(stats.open_s, 3) if stats.open_s is not None else None,
                "kill_all_s": round(stats.kill_s, 4), "client_cpu_s": round(cpu, 3),
                "client_cpu_share_of_one_core": round(cpu / wall, 3), "cycle_wall_s": round(wall, 2),
                "workers_idle_after_s": idle["seconds"], "errors": stats.errors}

    return asyncio.run(go())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--light", action="store_true", help="KV stand-in instead of the heavy SGLang runtime")
    p.add_argument("--sizes", default="60,250,1000")
    p.add_argument("--window", type=float, default=5.0, help="kill window (s) of the sessions-per-core runs")
    p.add_argument("--protocol-window", type=float, default=Settings().window_s,
                   help="kill window (s) of the protocol run (default: the protocol's own)")
    p.add_argument("--cycles", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=60, help="sessions per cycle of the protocol run")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    out: dict[str, Any] = {"backend": "light" if a.light else "sglang-0.5.15.post1-patched"}
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as d:
        pd = start_pd(a.light, Path(d))
        try:
            log(f"protocol: {a.cycles} x {a.concurrency} sessions, window {a.protocol_window:g} s")
            out["protocol"] = protocol_wall(pd, a.protocol_window, a.cycles, a.concurrency)
            log(f"protocol: {out['protocol']}")
            out["sessions_per_core"] = []
            for n in (int(x) for x in a.sizes.split(",")):
                log(f"open and kill {n} sessions")
                row = sessions_per_core(pd, n, a.window)
                out["sessions_per_core"].append(row)
                log(f"{n}: {row}")
        finally:
            pd.stop()
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        pr = out["protocol"]
        print(f"protocol ({out['backend']}): {pr['verdict']}, wall {pr['wall_s']:.1f} s, kill windows "
              f"{pr['kill_windows_s']:.1f} s, beyond the windows {pr['beyond_kill_windows_s']:.1f} s "
              f"(of which pauses+settle {pr['pauses_and_settle_s']:.1f} s); per check {pr['checks_s']}")
        print("sessions  opened  answered  first-token  killed  all-sent  kill-all  client-cpu  cpu/core")
        for r in out["sessions_per_core"]:
            print(f"{r['sessions']:8d}  {r['opened']:6d}  {r['answered']:8d}  {r['first_token']:11d}  "
                  f"{r['killed']:6d}  {r['all_sent_s']!s:>7}s  {r['kill_all_s']:7.4f}s  {r['client_cpu_s']:9.2f}s  "
                  f"{r['client_cpu_share_of_one_core']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
