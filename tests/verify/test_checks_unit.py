"""Config-gate comparisons: plan vs /server_info, prefill/decode agreement, router listings."""

from __future__ import annotations

from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet.verify.checks import compare_worker, kv_disagreements, router_worker_urls
from pdfleet.verify.targets import Target, Worker, from_plan, from_urls

INFO = {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "nixl", "tp_size": 4,
        "served_model_name": "m", "version": "0.5.15.post1", "page_size": 256, "kv_cache_dtype": "auto"}


def _target() -> Target:
    return Target("http://r", [Worker("p", "prefill", "http://p", tp=4)], model="m", sglang_version="0.5.15.post1")


def test_matching_worker() -> None:
    t = _target()
    assert compare_worker(t.workers[0], INFO, t) == []


def test_every_mismatch_is_named() -> None:
    t = _target()
    bad = {**INFO, "disaggregation_mode": "null", "disaggregation_transfer_backend": "mooncake", "tp_size": 8,
           "served_model_name": "other", "version": "0.5.23"}
    problems = compare_worker(t.workers[0], bad, t)
    assert len(problems) == 5
    assert any("mooncake" in p for p in problems) and any("0.5.23" in p for p in problems)


def test_unknown_expectations_are_not_checked() -> None:
    t = from_urls("http://r", ["http://p"], ["http://d"])
    assert compare_worker(t.workers[0], {**INFO, "tp_size": 2, "version": "x", "served_model_name": "y"}, t) == []


def test_kv_agreement() -> None:
    infos = {"p": INFO, "d": {**INFO, "disaggregation_mode": "decode", "page_size": 64}}
    out = kv_disagreements(infos, {"p": "prefill", "d": "decode"})
    assert len(out) == 1 and "page_size" in out[0] and "p=256" in out[0] and "d=64" in out[0]


def test_router_listing_shapes() -> None:
    assert router_worker_urls({"workers": [{"url": "http://a/"}, {"url": "http://b"}]}) == {"http://a", "http://b"}
    assert router_worker_urls({"workers": [{"worker": "http://a", "load": 0}]}) == {"http://a"}
    assert router_worker_urls({"urls": ["http://a"], "prefill": ["http://p"]}) == {"http://a", "http://p"}
    assert router_worker_urls(["http://x"]) == {"http://x"}
    assert router_worker_urls("nonsense") == set()


def test_target_from_the_sim_plan() -> None:
    t = from_plan(plan_inventory(REPO_ROOT / "inventory" / "sim"))
    roles = sorted(w.role for w in t.workers)
    assert roles == ["decode", "prefill"]
    assert all(w.tp == 4 and w.host == "node1" and w.name.startswith("pdfleet-") for w in t.workers)
    assert t.router_url == "http://10.77.0.11:8000" and t.model == "deepseek-ai/DeepSeek-V4-Flash"
    assert t.sglang_version == "0.5.15.post1" and t.profile == "pd-4p4d"



def test_missing_queue_gauges_make_recovery_inconclusive_not_silent() -> None:
    """Issue 11 item 4: a PD gauge a worker does not export is reported as missing, never dropped."""
    import asyncio

    from pdfleet.verify import checks
    from pdfleet.verify.settings import Settings
    from pdfleet.verify.targets import Target, Worker

    from .fakeserver import FakeServer

    async def go() -> None:
        srv = await FakeServer(metrics="sglang:num_running_reqs 0\nsglang:num_queue_reqs 0\n").start()
        try:
            target = Target(router_url=srv.url, workers=[Worker("prefill", "prefill", srv.url)], model="m")
            s = Settings(health_max_s=5.0, probe_concurrency=2, idle_deadline_s=1.0)
            r = await checks.recovery(target, "m", s)
            assert r.status == "inconclusive", r.summary
            missing = r.measured["queue_gauges_missing"]["prefill"]
            assert missing == ["sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_prefill_inflight_queue_reqs"]
            assert any("not exported" in f for f in r.failures)
            srv.metrics += "sglang:num_prefill_bootstrap_queue_reqs 0\nsglang:num_prefill_inflight_queue_reqs 0\n"
            assert (await checks.recovery(target, "m", s)).status == "pass"
        finally:
            await srv.stop()

    asyncio.run(go())


MONO_IDLE = "sglang:num_running_reqs 0\nsglang:num_queue_reqs 0\n"
MONO_BUSY = "sglang:num_running_reqs 3\nsglang:num_queue_reqs 7\n"


def test_the_cascade_pause_ends_when_the_queues_empty_and_not_before() -> None:
    """wait_quiet (the cascade's pause and settle): busy queues keep it waiting, two empty reads end it early;
    queues that never empty, an unexported gauge or an unreachable worker get the whole time."""
    import asyncio
    import time

    from pdfleet.verify import checks
    from pdfleet.verify.settings import Settings
    from pdfleet.verify.targets import Target, Worker

    from .fakeserver import FakeServer

    async def go() -> None:
        srv = await FakeServer(metrics=MONO_BUSY).start()
        s = Settings(http_timeout_s=1.0)
        try:
            target = Target(router_url=srv.url, workers=[Worker("mono", "mono", srv.url)], model="m")

            async def drain_after(seconds: float) -> None:
                await asyncio.sleep(seconds)
                srv.metrics = MONO_IDLE

            drain = asyncio.create_task(drain_after(1.0))
            waited = await checks.wait_quiet(target, s, 5.0, interval_s=0.1)
            await drain
            assert 1.0 <= waited < 2.0, waited  # not before the queues emptied, soon after
            srv.metrics = MONO_BUSY  # a wedged worker: its queues never empty
            assert await checks.wait_quiet(target, s, 1.0, interval_s=0.1) >= 1.0
            srv.metrics = "sglang:num_running_reqs 0\n"  # idle cannot be proven without num_queue_reqs
            assert await checks.wait_quiet(target, s, 1.0, interval_s=0.1) >= 1.0
            srv.metrics = MONO_IDLE
            t0 = time.monotonic()
            assert await checks.wait_quiet(target, s, 5.0, interval_s=0.1) < 1.0
            assert time.monotonic() - t0 < 1.0
        finally:
            await srv.stop()
        gone = Target(router_url=srv.url, workers=[Worker("mono", "mono", srv.url)], model="m")
        assert await checks.wait_quiet(gone, s, 1.0, interval_s=0.1) >= 1.0

    asyncio.run(go())
