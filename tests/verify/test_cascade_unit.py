"""Cascade scheduling and counting against the in-process server (no router, no workers)."""

from __future__ import annotations

import asyncio
import io
import random

import pytest
from pdfleet.verify.cascade import abort_cascades, kill_times, long_prompt
from pdfleet.verify.settings import Settings

from .fakeserver import FakeServer


def test_kill_times_window_and_spread() -> None:
    assert kill_times(3, 20.0, "window", random.Random(1)) == [20.0] * 3
    times = kill_times(300, 10.0, "spread", random.Random(1))
    assert all(0 <= t <= 10.0 for t in times)
    early, mid, late = (sum(lo <= t < hi for t in times) for lo, hi in ((0, 1), (1, 6), (6, 10.01)))
    assert (early, mid, late) == (100, 100, 100)
    with pytest.raises(ValueError, match="kill mode"):
        kill_times(1, 1.0, "sometimes", random.Random(1))


def test_long_prompt_is_unique_and_sized() -> None:
    a, b = long_prompt(100, "a"), long_prompt(100, "b")
    assert a != b and len(a.split()) > 100


def _settings(**kw: object) -> Settings:
    base = dict(cycles=2, concurrency=20, window_s=0.5, pause_s=0.0, settle_s=0.0, cascade_prompt_words=5,
                cascade_max_tokens=10_000, progress_interval_s=0.2)
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


def test_window_kills_every_open_session() -> None:
    async def go() -> None:
        srv = await FakeServer(tokens=10_000, interval_s=0.02).start()
        err = io.StringIO()
        try:
            res = await abort_cascades(srv.url + "/v1/chat/completions", "m", _settings(), out=err)
            for _ in range(100):
                if srv.disconnects >= 40:
                    break
                await asyncio.sleep(0.02)
        finally:
            await srv.stop()
        m = res.measured
        assert res.status == "pass"
        assert m["sessions"] == 40 and m["opened"] == 40 and m["killed"] == 40 and m["completed"] == 0
        assert m["killed_phases"] == {"streaming": 40}
        assert srv.disconnects == 40
        assert "cascade 1/2" in err.getvalue() and "cascade 2/2 done" in err.getvalue()

    asyncio.run(go())


def test_sessions_that_finish_first_are_not_killed() -> None:
    async def go() -> None:
        srv = await FakeServer(tokens=3, interval_s=0.001).start()
        try:
            res = await abort_cascades(srv.url + "/v1/chat/completions", "m", _settings(cycles=1, window_s=5.0),
                                       out=io.StringIO())
        finally:
            await srv.stop()
        assert res.measured["killed"] == 0 and res.measured["completed"] == 20
        assert "nothing was killed" in res.summary
        # issue 11 item 4: a cascade that killed nothing proved nothing
        assert res.status == "fail" and "killed no session" in res.failures[0]

    asyncio.run(go())


def test_unreachable_router_fails_the_cascade() -> None:
    async def go() -> None:
        srv = await FakeServer().start()
        url = srv.url
        await srv.stop()
        res = await abort_cascades(url + "/v1/chat/completions", "m", _settings(cycles=1, concurrency=3),
                                   out=io.StringIO())
        assert res.status == "fail" and res.measured["opened"] == 0

    asyncio.run(go())


def test_cascade_opens_its_sessions_per_prefill() -> None:
    from pdfleet.inventory_plan import plan_inventory
    from pdfleet.paths import REPO_ROOT
    from pdfleet.verify.protocol import cascade_settings
    from pdfleet.verify.settings import Settings
    from pdfleet.verify.targets import from_plan

    examples = REPO_ROOT / "inventory" / "examples"
    s = Settings(concurrency=60)
    assert cascade_settings(s, from_plan(plan_inventory(examples / "pd-4p4d"))).concurrency == 60
    assert cascade_settings(s, from_plan(plan_inventory(examples / "pd-fleet"))).concurrency == 180
    assert cascade_settings(s, from_plan(plan_inventory(examples / "mono-tp8"))).concurrency == 60


def test_pauses_and_settle_use_the_quiet_wait_and_are_reported() -> None:
    """Between cycles and after the last one the cascade waits through ``quiet`` (at most pause_s / settle_s);
    without one it sleeps the whole time."""
    async def go() -> None:
        srv = await FakeServer(tokens=10_000, interval_s=0.02).start()
        asked: list[float] = []

        async def quiet(limit: float) -> float:
            asked.append(limit)
            return 0.1

        try:
            res = await abort_cascades(srv.url + "/v1/chat/completions", "m",
                                       _settings(cycles=3, concurrency=4, pause_s=7.0, settle_s=4.0),
                                       out=io.StringIO(), quiet=quiet)
            assert asked == [7.0, 7.0, 4.0]
            assert res.measured["pauses_s"] == [0.1, 0.1] and res.measured["settle_s"] == 0.1
            slept = await abort_cascades(srv.url + "/v1/chat/completions", "m",
                                         _settings(cycles=2, concurrency=2, pause_s=0.3, settle_s=0.2),
                                         out=io.StringIO())
            assert slept.measured["pauses_s"] == [0.3] and slept.measured["settle_s"] == 0.2
        finally:
            await srv.stop()

    asyncio.run(go())
