"""Check 3: abort cascades — C concurrent streaming sessions through the router, killed abruptly.

Kill modes:

``window``
    every session still open is dropped at the same moment, ``window_s`` after the cycle started (the
    incident: a 60-session agent killed after 20 s).
``spread``
    kill times are spread over three cohorts so the aborts land in different stages of a PD request:
    a third at 0-10 % of the window (mostly *before the first token*: the prefill bootstrap / decode
    prealloc queues), a third at 10-60 % (behind a backed-up prefill: the KV *transfer* is pending, which
    is what makes the decode push ``ABORT`` to the prefill), a third at 60-100 % (*mid-decode*).

Each kill records what the client had seen at that moment (``killed_phase``), so the report says where
the aborts really landed. Sessions that finished before their kill time are not counted as killed.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from pdfleet.verify.client import StreamSession, chat_body
from pdfleet.verify.result import CheckResult, status_from
from pdfleet.verify.settings import KILL_MODES, Settings

FILLER_TEXT = ("the prefill server computes the key value cache of this long agent context and hands it to the "
               "decode server over NIXL before the first token streams back through the router")
FILLER = FILLER_TEXT.split()


# A session killed in one of these phases had sent its request and seen no token: its KV transfer may still be
# pending, so the decode's abort can reach the prefill as an ABORT message (the logs check's evidence floor).
WAITING_PHASES = ("waiting-headers", "before-first-token")


def killed_waiting(cascade: CheckResult | None) -> int | None:
    """Sessions the cascade killed before their first token; None without a cascade measurement."""
    if cascade is None or not cascade.measured or "killed_phases" not in cascade.measured:
        return None
    phases = cascade.measured["killed_phases"]
    return sum(int(phases.get(p, 0)) for p in WAITING_PHASES) if isinstance(phases, dict) else None


# Waits at most the given seconds for every worker's queues to empty (the kills' aborts have landed); returns
# the seconds it waited. The protocol passes one built on the workers' PD queue gauges.
Quiet = Callable[[float], Awaitable[float]]


async def _quiet_or_sleep(limit_s: float, quiet: Quiet | None) -> float:
    if limit_s <= 0:
        return 0.0
    if quiet is None:
        await asyncio.sleep(limit_s)
        return limit_s
    return await quiet(limit_s)


def long_prompt(words: int, tag: str) -> str:
    """A unique prefix (defeats prefix caching) and ``words`` words of filler."""
    body = " ".join(FILLER[i % len(FILLER)] for i in range(max(0, words)))
    return f"[{tag}] Summarise the following tool output in one line. {body}"


def kill_times(n: int, window_s: float, mode: str, rng: random.Random) -> list[float]:
    """Seconds after the cycle start at which each of ``n`` sessions is killed."""
    if mode not in KILL_MODES:
        raise ValueError(f"kill mode {mode!r}: use one of {', '.join(KILL_MODES)}")
    if mode == "window":
        return [window_s] * n
    cohorts = ((0.0, 0.1), (0.1, 0.6), (0.6, 1.0))
    times = [window_s * rng.uniform(*cohorts[i % 3]) for i in range(n)]
    rng.shuffle(times)
    return times


@dataclass
class CycleStats:
    cycle: int
    opened: int = 0  # connected and the request sent
    answered: int = 0  # response headers received
    first_token: int = 0
    completed: int = 0
    failed: int = 0
    killed: int = 0
    killed_phases: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    open_s: float | None = None  # time until every request was sent (or its session ended)
    kill_s: float = 0.0  # time to drop every kill
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _count(sessions: list[StreamSession], stats: CycleStats) -> None:
    stats.opened = sum(s.sent_s is not None for s in sessions)
    stats.answered = sum(s.headers_s is not None for s in sessions)
    stats.first_token = sum(s.first_token_s is not None for s in sessions)
    stats.completed = sum(s.phase == "completed" and not s.killed for s in sessions)
    stats.failed = sum(s.phase == "failed" and not s.killed for s in sessions)
    stats.killed = sum(s.killed for s in sessions)
    stats.killed_phases = dict(Counter(s.killed_phase for s in sessions if s.killed_phase))
    stats.errors = sorted({s.error for s in sessions if s.error and not s.killed})[:5]


async def _progress(label: str, sessions: list[StreamSession], stats: CycleStats, t0: float, s: Settings,
                    out: TextIO) -> None:
    while True:
        await asyncio.sleep(s.progress_interval_s)
        _count(sessions, stats)
        print(f"[verify] {label}: t={time.monotonic() - t0:5.1f}/{s.window_s:g}s open {stats.opened}/"
              f"{len(sessions)} answered {stats.answered} first-token {stats.first_token} done {stats.completed} "
              f"failed {stats.failed} "
              f"killed {stats.killed}", file=out, flush=True)


async def run_cycle(url: str, model: str, s: Settings, cycle: int, rng: random.Random,
                    out: TextIO = sys.stderr, label: str = "") -> CycleStats:
    """One cycle: open ``concurrency`` sessions, kill them on schedule, wait for the kills to land."""
    stats = CycleStats(cycle)
    tag = uuid.uuid4().hex[:8]
    sessions = [StreamSession(i, url, chat_body(model, long_prompt(s.cascade_prompt_words, f"{tag}-{i}"),
                                                s.cascade_max_tokens, True), rst=s.kill_rst)
                for i in range(s.concurrency)]
    times = kill_times(len(sessions), s.window_s, s.kill_mode, rng)
    t0 = time.monotonic()
    tasks = [asyncio.create_task(sess.run()) for sess in sessions]
    progress = asyncio.create_task(_progress(label or f"cascade {cycle}", sessions, stats, t0, s, out))
    watcher = asyncio.create_task(_time_open(sessions, stats, t0))
    try:
        for when, group in _groups(sessions, times):
            if not await _sleep_unless_all_done(sessions, t0 + when):
                break
            k0 = time.monotonic()
            for sess in group:
                sess.kill()
            stats.kill_s += time.monotonic() - k0
        await asyncio.sleep(0)
    finally:
        for t in (*tasks, progress, watcher):
            t.cancel()
        await asyncio.gather(*tasks, progress, watcher, return_exceptions=True)
    _count(sessions, stats)
    stats.duration_s = time.monotonic() - t0
    return stats


def _groups(sessions: list[StreamSession], times: list[float]) -> list[tuple[float, list[StreamSession]]]:
    by_time: dict[float, list[StreamSession]] = {}
    for sess, when in zip(sessions, times, strict=True):
        by_time.setdefault(when, []).append(sess)
    return sorted(by_time.items(), key=lambda kv: kv[0])


async def _sleep_unless_all_done(sessions: list[StreamSession], until: float) -> bool:
    """Sleep until the monotonic time ``until``; False (early) once every session has ended."""
    while (left := until - time.monotonic()) > 0:
        if all(s.done for s in sessions):
            return False
        await asyncio.sleep(min(left, 0.05))
    return True


async def _time_open(sessions: list[StreamSession], stats: CycleStats, t0: float) -> None:
    while not all(s.sent_s is not None or s.done for s in sessions):
        await asyncio.sleep(0.01)
    stats.open_s = time.monotonic() - t0


async def abort_cascades(url: str, model: str, s: Settings, out: TextIO = sys.stderr,
                         on_cycle: Callable[[CycleStats], None] | None = None,
                         quiet: Quiet | None = None) -> CheckResult:
    """Check 3: ``cycles`` cycles; fails when no session could be opened or none was killed.

    Between cycles and after the last one the cluster gets up to ``pause_s`` / ``settle_s`` to absorb the
    aborts: with ``quiet`` the wait ends as soon as every worker's queues are empty (a wedged worker whose
    queues never drain gets the whole time), without it the whole time is slept."""
    t0 = time.monotonic()
    rng = random.Random(s.seed)
    cycles: list[CycleStats] = []
    paused: list[float] = []
    for c in range(1, s.cycles + 1):
        if c > 1:
            paused.append(await _quiet_or_sleep(s.pause_s, quiet))
        stats = await run_cycle(url, model, s, c, rng, out, f"cascade {c}/{s.cycles}")
        cycles.append(stats)
        print(f"[verify] cascade {c}/{s.cycles} done: opened {stats.opened}, first token {stats.first_token}, "
              f"killed {stats.killed} {stats.killed_phases}, completed {stats.completed}, failed {stats.failed}",
              file=out, flush=True)
        if on_cycle:
            on_cycle(stats)
    settled = await _quiet_or_sleep(s.settle_s, quiet)
    total = s.concurrency * s.cycles
    opened = sum(c.opened for c in cycles)
    killed = sum(c.killed for c in cycles)
    phases: Counter[str] = Counter()
    for c in cycles:
        phases.update(c.killed_phases)
    failures = []
    if opened == 0 and total:
        failures.append(f"no session of {total} could be opened through the router: "
                        f"{'; '.join(e for c in cycles for e in c.errors)[:300]}")
    elif killed == 0 and total:
        failures.append(f"the cascade killed no session of {total}: every session ended before its kill time "
                        f"(window {s.window_s:g} s); raise --cascade-max-tokens or shorten --window")
    measured = {"sessions": total, "opened": opened, "answered": sum(c.answered for c in cycles),
                "first_token": sum(c.first_token for c in cycles), "killed": killed,
                "killed_phases": dict(phases), "completed": sum(c.completed for c in cycles),
                "failed": sum(c.failed for c in cycles), "kill_windows_s": s.window_s * s.cycles,
                "pauses_s": [round(x, 2) for x in paused], "settle_s": round(settled, 2)}
    thresholds = {"cycles": s.cycles, "concurrency": s.concurrency, "window_s": s.window_s,
                  "kill_mode": s.kill_mode, "killed_min": 1}
    summary = f"{s.cycles} x {s.concurrency} sessions ({s.kill_mode}, {s.window_s:g} s): {killed} killed"
    if killed == 0:
        summary += " (nothing was killed: every session ended before its kill time)"
    return CheckResult("cascade", status_from(failures), summary, measured, thresholds, failures,
                       {"cycles": [c.to_dict() for c in cycles]}, time.monotonic() - t0)
