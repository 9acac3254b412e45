"""pdfleet.fleet against the real router (sglang-router 0.3.2) and simulated workers on loopback: a drain lets
a stream in flight finish, new requests meanwhile fail fast, re-add confirms routing (light KV stand-in: the test
is about the router steps); the isolated gate passes a pair on SGLang 0.5.15.post1's real, patched NIXL code
through a private router and fails one on its real, pristine code, whose bootstrap thread the gate's own abort
cascade kills (the logs check finds SGLang's assert in the traceback Python printed, not a stand-in's line)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

import pytest
from pdfleet import fleet
from pdfleet.verify.logs import FileLogs
from pdfleet_sim.testing.localpd import LocalPD, http_json
from pdfleet_sim.testing.realwedge import SGLANG_VERSION
from pdfleet_sim.testing.waiting import wait_until

SGLANG_ASSERT = "AssertionError: First message should be b'NixlMsgGuard'. Foreign traffic?"

pytestmark = pytest.mark.slow


def _pair(pd: LocalPD) -> fleet.Pair:
    return fleet.Pair("local", (
        fleet.Member("prefill", "prefill", pd.prefill_url, "", "127.0.0.1", pd.bootstrap_port),
        fleet.Member("decode", "decode", pd.decode_url, "", "127.0.0.1")))


def _stream(url: str, model: str, max_tokens: int, out: dict[str, Any]) -> None:
    body = json.dumps({"model": model, "stream": True, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "tell me a long story"}]}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            data = resp.read().decode()
        out["done"] = data.rstrip().endswith("data: [DONE]")
        out["chunks"] = data.count("data: ")
    except OSError as e:
        out["error"] = str(e)
    out["seconds"] = time.monotonic() - t0


def test_drain_lets_the_stream_finish_then_readd(local_pd: LocalPD) -> None:
    pd = local_pd
    router = fleet.RouterClient(pd.router_url)
    pair = _pair(pd)
    listed = {w.spec.url: w.spec for w in router.workers()}
    assert listed[pd.prefill_url].bootstrap_port == pd.bootstrap_port

    stream: dict[str, Any] = {}
    t = threading.Thread(target=_stream, args=(pd.router_url, pd.model, 120, stream))  # ~3 s at 40 tokens/s
    t.start()
    wait_until("the stream running on the decode", lambda: fleet.read_load(pd.decode_url, "decode").busy, 30,
               detail=lambda: (stream, fleet.read_load(pd.decode_url, "decode").describe()))
    loads: list[bool] = []
    res = fleet.drain(router, pair, timeout_s=60, progress=lambda r: loads.append(r.idle))
    t.join(60)
    assert stream.get("done"), stream  # the stream in flight finished normally through the removed pair
    assert res.ok and not loads[0], "the first reading must see the stream still running"
    assert {s.url for s in res.removed} == set(pair.urls) and router.workers() == []
    assert res.removed == [listed[pd.decode_url], listed[pd.prefill_url]]

    t0 = time.monotonic()  # out of the router: a new request gets a fast error, not a hung connection
    status, _ = http_json(pd.router_url + "/v1/chat/completions",
                          {"model": pd.model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
                          timeout=30)
    assert status >= 500 and time.monotonic() - t0 < 10

    back = fleet.readd(router, pair, res.removed, pd.model, confirm_timeout_s=60)
    assert back.confirmed, back.problems
    assert set(back.added) == set(pair.urls) and back.probes >= 1
    assert {w.spec for w in router.workers()} == set(listed.values())  # exactly as listed before
    assert router.ready()
    assert fleet.pair_canary(pair, pd.model).ok


def test_gate_passes_a_healthy_pair_without_the_production_router(real_pd: LocalPD) -> None:
    pd = real_pd
    router = fleet.RouterClient(pd.router_url)
    fleet.remove_pair(router, _pair(pd))
    logs = FileLogs({"prefill": pd.log_dir / "prefill.log", "decode": pd.log_dir / "decode.log"})
    res = fleet.isolated_gate(_pair(pd), fleet.gate_settings(), logs, model=pd.model)
    assert res.ok, res.describe()
    names = [c["name"] for c in res.report["checks"]]
    assert names == ["config", "liveness", "cascade", "recovery", "logs", "bench"], names
    assert [c["status"] for c in res.report["checks"]] == ["pass"] * 5 + ["skipped"], res.report["checks"]
    assert res.report["target"]["router"] != pd.router_url
    assert router.workers() == []  # the gate never touched the production router


def test_gate_fails_a_wedging_pair(pristine_pd: LocalPD) -> None:
    pd = pristine_pd
    logs = FileLogs({"prefill": pd.log_dir / "prefill.log", "decode": pd.log_dir / "decode.log"})
    # shorter recovery deadlines than a rollout's (30 s): a dead thread never answers, however long the wait
    settings = fleet.gate_settings(recovery_deadline_s=8.0, probe_deadline_s=8.0, idle_deadline_s=8.0)
    res = fleet.isolated_gate(_pair(pd), settings, logs, model=pd.model, sglang_version=SGLANG_VERSION)
    assert not res.ok and res.verdict == "fail", res.describe()
    failed = {f["check"] for f in res.failures}
    assert {"recovery", "logs"} <= failed, res.describe()
    checks = {c["name"]: c for c in res.report["checks"]}
    assert checks["cascade"]["measured"]["killed"] >= 1, checks["cascade"]
    measured = checks["logs"]["measured"]
    assert measured["thread_death"] >= 1 and measured["aborts_handled_by_prefill"] == 0, measured
    lines = [d["line"] for d in measured["deaths"]]
    # threads dying at once may interleave their reports: any, not all
    assert any("(bootstrap_thread)" in line or SGLANG_ASSERT in line for line in lines), lines
    # ... and the assert was raised in the pristine conn.py of the runtime (nothing of ours prints it)
    log = (pd.log_dir / "prefill.log").read_text()
    assert SGLANG_ASSERT in log and "/pristine/conn.py\", line" in log and "in bootstrap_thread" in log
