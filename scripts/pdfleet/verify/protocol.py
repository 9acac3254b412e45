"""The verification protocol, in order: config gate, deep liveness, abort cascades, recovery, benchmark,
logs (read last, so they cover the whole run; reported in protocol order).

A check that makes later ones meaningless stops them: an unreachable router stops everything (exit 2); a
failed config gate or deep liveness skips the cascade, recovery and benchmark (the cluster was not serving
before the protocol began: nothing after it could be attributed to the aborts); a failed recovery skips the
benchmark (a wedged cluster has no throughput to compare). The logs are always read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from typing import TextIO

from pdfleet.verify import bench, checks
from pdfleet.verify.cascade import abort_cascades, killed_waiting
from pdfleet.verify.logs import JournalDirLogs, LogSource, logs_check
from pdfleet.verify.metrics import counter_deltas
from pdfleet.verify.report import Report
from pdfleet.verify.result import CHECK_NAMES, DEFERRED, FAIL, PASS, CheckResult, skipped
from pdfleet.verify.settings import Settings
from pdfleet.verify.signatures import ABORT_LOG_INTERVAL_S
from pdfleet.verify.targets import Target, Worker


def _say(out: TextIO, msg: str) -> None:
    print(f"[verify] {msg}", file=out, flush=True)



def cascade_settings(s: Settings, target: Target) -> Settings:
    """``--concurrency`` counts sessions per prefill worker: the router spreads a cascade over every prefill,
    and each prefill's queue must still back up past the kill window, or no ABORT meets a pending KV
    transfer (a three-pair fleet drains 60 sessions in a third of the time one pair takes)."""
    prefills = sum(w.role == "prefill" for w in target.workers)
    return dataclasses.replace(s, concurrency=s.concurrency * max(1, prefills))

async def _model(target: Target, s: Settings) -> str:
    if target.model:
        return target.model
    try:
        data = (await checks.client.request(target.router_url + "/v1/models", timeout_s=s.http_timeout_s)).json()
        return str(data["data"][0]["id"])
    except (checks.client.HTTPClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError):
        return "default"


async def _counters(target: Target, s: Settings) -> dict[str, dict[str, float]]:
    metrics = await asyncio.gather(*(checks.fetch_metrics(w.url, s.http_timeout_s) for w in target.workers))
    return {w.name: m or {} for w, m in zip(target.workers, metrics, strict=True)}


async def run_protocol(target: Target, s: Settings, logs: LogSource | None, defer_logs: bool = False,
                       out: TextIO = sys.stderr) -> Report:
    started = time.time()
    t0 = time.monotonic()
    report = Report(target=target.summary(), settings=s.to_dict(), started_epoch=started)
    results: dict[str, CheckResult] = {}
    if logs is not None:
        logs.mark(target.workers)

    def record(result: CheckResult) -> CheckResult:
        results[result.name] = result
        _say(out, f"{result.name}: {result.status.upper()} - {result.summary}")
        return result

    def wanted(name: str) -> bool:
        if name in s.skip:
            record(skipped(name, "skipped on request (--skip)"))
            return False
        return True

    stop_traffic = ""
    cascade_end: float | None = None
    if wanted("config"):
        _say(out, f"config gate against {target.router_url} ({len(target.workers)} workers)")
        try:
            gate, infos = await checks.config_gate(target, s)
        except checks.Unreachable as e:
            report.error = str(e)
            report.timings = {"wall_s": round(time.monotonic() - t0, 3)}
            _say(out, f"could not run: {e}")
            return report
        record(gate)
        report.server_versions = {n: i.get("version") for n, i in infos.items()}
        if gate.status == FAIL:
            stop_traffic = "the config gate failed"
    model = await _model(target, s)
    before = await _counters(target, s)
    if wanted("liveness"):
        if stop_traffic:
            record(skipped("liveness", f"skipped: {stop_traffic}"))
        else:
            _say(out, f"deep liveness: a fresh request through the router (deadline {s.liveness_deadline_s:g} s)")
            if record(await checks.deep_liveness(target, model, s)).status == FAIL:
                stop_traffic = "deep liveness failed before any abort (the cluster was not serving)"
    if wanted("cascade"):
        if stop_traffic:
            record(skipped("cascade", f"skipped: {stop_traffic}"))
        else:
            cs = cascade_settings(s, target)
            _say(out, f"abort cascades: {cs.cycles} x {cs.concurrency} sessions, kill mode {cs.kill_mode}, "
                      f"window {cs.window_s:g} s")
            record(await abort_cascades(target.router_url + "/v1/chat/completions", model, cs, out,
                                        quiet=lambda limit: checks.wait_quiet(target, s, limit)))
            cascade_end = time.monotonic()
    if wanted("recovery"):
        if stop_traffic:
            record(skipped("recovery", f"skipped: {stop_traffic}"))
        else:
            _say(out, "recovery: /health, a fresh request, a sustained probe, PD queues back to idle")
            record(await checks.recovery(target, model, s))
    if wanted("bench"):
        rec = results.get("recovery")
        if stop_traffic or (rec is not None and rec.status != PASS):
            record(skipped("bench", f"skipped: {stop_traffic or 'recovery failed'} (nothing to compare)"))
        else:
            record(await _bench(target, model, s, report, out))
    report.metric_deltas = {n: counter_deltas(before.get(n, {}), m) for n, m in (await _counters(target, s)).items()}
    if wanted("logs"):
        await _abort_lines_written(cascade_end)  # also before a deferred read: Ansible dumps the journals next
        if defer_logs:
            record(CheckResult("logs", DEFERRED, "deferred: resume with --resume REPORT --journal-dir DIR"))
        else:
            _say(out, f"logs: {logs.description if logs else 'no source'} since the protocol start")
            record(logs_check(target.workers, logs, s, report.metric_deltas, target.sglang_version,
                              killed_waiting(results.get("cascade"))))
    report.checks = [results[n] for n in CHECK_NAMES if n in results]
    _store_baseline(report, s, out)
    wall = time.monotonic() - t0
    windows = s.window_s * s.cycles if "cascade" in results and results["cascade"].measured else 0.0
    report.timings = {"wall_s": round(wall, 3), "kill_windows_s": windows,
                      "beyond_kill_windows_s": round(wall - windows, 3),
                      "checks_s": {c.name: round(c.duration_s, 3) for c in report.checks}}
    return report


async def _abort_lines_written(cascade_end: float | None) -> None:
    """Before the logs are read: the prefill writes its count of handled ABORTs at most once per
    ABORT_LOG_INTERVAL_S, so the count of the cascade's last ABORTs may still be pending that long after the
    cascade (and its settle) ended. Usually the recovery check took longer already."""
    if cascade_end is None:
        return
    left = cascade_end + ABORT_LOG_INTERVAL_S + 0.5 - time.monotonic()
    if left > 0:
        await asyncio.sleep(left)


async def _bench(target: Target, model: str, s: Settings, report: Report, out: TextIO) -> CheckResult:
    _say(out, f"benchmark: {s.bench_requests} requests, concurrency {s.bench_concurrency}, tool {s.bench_tool}")
    t0 = time.monotonic()
    result, error = None, None
    try:
        if s.bench_tool == "sglang":
            result = bench.sglang_load(target.router_url, s, Path(s.baseline_file).parent)
        else:
            result = await bench.pdfleet_load(target.router_url + "/v1/chat/completions", model, s)
    except (RuntimeError, ValueError, OSError) as e:
        error = str(e)
    versions = {"sglang": target.sglang_version, "servers": report.server_versions}
    return bench.bench_check(result, error, target.profile, s, versions, time.monotonic() - t0,
                             key=bench.baseline_key(report.target))


def resume_with_journals(report: Report, journal_dir: Path, s: Settings, out: TextIO = sys.stderr) -> Report:
    """Finish a ``--defer-logs`` report: scan the journal dumps Ansible collected, recompute the verdict."""
    workers = [Worker(**w) for w in report.target.get("workers", [])]
    _say(out, f"logs: journal dumps in {journal_dir} for {len(workers)} workers")
    report.replace(logs_check(workers, JournalDirLogs(journal_dir), s, report.metric_deltas,
                                  report.target.get("sglang_version"), killed_waiting(report.check("cascade"))))
    order = {n: i for i, n in enumerate(CHECK_NAMES)}
    report.checks.sort(key=lambda c: order.get(c.name, len(order)))
    _store_baseline(report, s, out)
    return report


def _store_baseline(report: Report, s: Settings, out: TextIO) -> None:
    """Once the verdict is known: a passing run with no baseline (or --save-baseline) stores its benchmark."""
    try:
        note = bench.store_if_passed(report.verdict, report.check("bench"), s)
    except (OSError, ValueError) as e:
        note = f"benchmark NOT stored as the baseline: {e}"
    if note:
        report.baseline_note = note
        _say(out, note)
