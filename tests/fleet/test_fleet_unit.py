"""pdfleet.fleet against fakes: load numbers (missing never idle), router membership with asynchronous jobs,
drain, re-add with a confirmed request counter, the pair canary's request shape."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pdfleet import fleet
from pdfleet.fleet import load as fleet_load

from .fakes import FakeRouter, FakeWorker, metrics, sglang_loads


@pytest.fixture
def worker() -> Iterator[FakeWorker]:
    w = FakeWorker().start()
    yield w
    w.stop()


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    r = FakeRouter().start()
    yield r
    r.stop()


def test_sglang_loads_idle_and_busy(worker: FakeWorker) -> None:
    worker.loads = sglang_loads(dp=2)
    worker.metrics_text = metrics(active={"/v1/chat/completions": 0, "/metrics": 1})
    got = fleet.read_load(worker.url, "prefill")
    assert got.idle, got.describe()  # the /metrics scrape itself is not user traffic
    worker.loads = sglang_loads(bootstrap=3, dp=2)
    got = fleet.read_load(worker.url, "prefill")
    assert not got.idle and got.numbers["prefill_bootstrap"] == 6  # summed over DP ranks
    assert "prefill_bootstrap=6" in got.describe()


def test_stream_still_being_written_is_busy(worker: FakeWorker) -> None:
    """The scheduler is done, but a response is still open: http_requests_active keeps it busy."""
    worker.loads = sglang_loads()
    worker.metrics_text = metrics(active={"/v1/chat/completions": 1})
    got = fleet.read_load(worker.url, "decode")
    assert not got.idle and got.numbers["http_active"] == 1


def test_disagg_from_metrics_when_loads_lacks_it(worker: FakeWorker) -> None:
    """The simulated worker's /v1/loads has only the core numbers: the queues come from /metrics."""
    worker.loads = {"loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}]}
    worker.metrics_text = metrics(active={}, bootstrap=0, inflight=2)
    got = fleet.read_load(worker.url, "prefill")
    assert not got.idle and got.numbers["prefill_inflight"] == 2 and not got.missing


@pytest.mark.parametrize("case", ["no-disagg", "no-http-active", "no-metrics", "no-loads-no-metrics"])
def test_missing_numbers_are_never_idle(worker: FakeWorker, case: str) -> None:
    worker.loads = {"loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}]}
    worker.metrics_text = {"no-disagg": metrics(active={}), "no-http-active": metrics(bootstrap=0, inflight=0),
                           "no-metrics": None, "no-loads-no-metrics": None}[case]
    if case == "no-loads-no-metrics":
        worker.loads = None
    got = fleet.read_load(worker.url, "prefill")
    assert not got.idle and got.missing, got.to_dict()
    assert "unknown" in got.describe()


def test_unreachable_worker_is_not_idle() -> None:
    got = fleet.read_load("http://127.0.0.1:9", "decode", timeout_s=1)
    assert not got.idle and got.errors and set(got.missing) >= {"running", "http_active"}


def test_wait_idle_needs_consecutive_idle_reads() -> None:
    seq = iter([3, 0, 1, 0, 0, 0])

    def read(url: str, role: str) -> fleet.WorkerLoad:
        return fleet.WorkerLoad(url, role, {"running": float(next(seq))})

    res = fleet.wait_idle([("u", "mono")], timeout_s=10, interval_s=0, read=read)
    assert res.idle
    assert res.busy_at_start == {"u": {"running": 3.0}}  # what the wait was for: its first reading
    res = fleet.wait_idle([("u", "mono")], timeout_s=10, interval_s=0,
                          read=lambda u, r: fleet.WorkerLoad(u, r, {"running": 0.0}))
    assert res.idle and res.busy_at_start == {}  # nothing in flight: nothing waited for
    res = fleet.wait_idle([("u", "mono")], timeout_s=0, interval_s=0,
                          read=lambda u, r: fleet.WorkerLoad(u, r, {"running": 1.0}))
    assert not res.idle and "running=1" in res.describe()


def _pd_pair(prefill: FakeWorker, decode: FakeWorker) -> fleet.Pair:
    return fleet.Pair("gpu01", (fleet.Member("pdfleet-prefill0", "prefill", prefill.url, "gpu01", "127.0.0.1", 8998),
                                fleet.Member("pdfleet-decode0", "decode", decode.url, "gpu01", "127.0.0.1")))


def test_router_add_remove_wait_for_the_listing(router: FakeRouter) -> None:
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    spec = fleet.WorkerSpec("http://10.0.0.1:30000", "prefill", 8998, priority=7)
    entry, changed = client.add(spec, wait_s=5)
    assert changed and entry.spec == spec and client.find(spec.url) is not None
    assert client.add(spec)[1] is False  # idempotent: no second POST
    assert sum(c.startswith("POST") for c in router.calls) == 1
    assert '"priority": 7' in next(c for c in router.calls if c.startswith("POST"))
    assert client.remove(spec.url, wait_s=5) == spec  # the exact spec, for re-adding
    assert client.find(spec.url) is None
    assert client.remove(spec.url) is None  # absent: nothing to do


def test_router_change_not_shown_in_time_fails(router: FakeRouter) -> None:
    router.lag = 10_000
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    with pytest.raises(fleet.RouterError, match="not shown by GET /workers after"):
        client.add(fleet.WorkerSpec("http://10.0.0.1:30000", "decode"), wait_s=0.2)


def test_router_unreachable_names_the_router() -> None:
    with pytest.raises(fleet.RouterError, match=r"127\.0\.0\.1:9 did not answer"):
        fleet.RouterClient("http://127.0.0.1:9", timeout_s=1).workers()


def test_drain_and_readd(router: FakeRouter) -> None:
    prefill, decode = FakeWorker().start(), FakeWorker().start()
    try:
        pair = _pd_pair(prefill, decode)
        client = fleet.RouterClient(router.url, poll_interval_s=0.01)
        for m in pair.members:
            client.add(m.spec(), wait_s=5)
        for w in (prefill, decode):
            w.loads = sglang_loads()
            w.metrics_text = metrics(active={})
        res = fleet.drain(client, pair, timeout_s=5)
        assert res.ok and [s.worker_type for s in res.removed] == ["decode", "prefill"]  # decode out first
        assert client.workers() == []
        # back in: the counters only move when requests arrive; the fake "router" probes never reach them,
        # so routing is not confirmed, and the message names the counter and the probes
        bad = fleet.readd(client, pair, res.removed, "m", confirm_timeout_s=0.5, probe_deadline_s=1)
        assert not bad.confirmed and "num_requests_total stayed at 0.0" in bad.problems[0]
        assert {w.spec.url for w in client.workers()} == set(pair.urls)
        sent = []

        def route() -> None:  # the router sends the probe to this pair: both counters move
            sent.append(1)
            for w in (prefill, decode):
                w.metrics_text = metrics(active={}, requests_total=len(sent))

        router.on_chat = route
        ok = fleet.readd(client, pair, res.removed, "m", confirm_timeout_s=5)
        assert ok.confirmed and ok.added == [] and ok.probes == 1  # already listed: nothing added twice
        assert ok.after == {u: 1 for u in pair.urls}, ok.after
        # the pairing samples (the report pages draw them): counters before, the probe, counters after
        kinds = ["counts" if "counts" in s else "probe" for s in ok.samples]
        assert kinds == ["counts", "counts", "probe", "counts"], ok.samples
        assert ok.samples[-1]["counts"] == ok.after and ok.samples[2]["status"] == 200
        assert [s["t"] for s in ok.samples] == sorted(s["t"] for s in ok.samples)
        assert ok.to_dict()["samples"] == ok.samples
    finally:
        prefill.stop()
        decode.stop()


def test_drain_times_out_while_busy(router: FakeRouter, worker: FakeWorker) -> None:
    worker.loads = sglang_loads(running=2)
    worker.metrics_text = metrics(active={"/generate": 2})
    pair = fleet.Pair("h", (fleet.Member("pdfleet-mono0", "mono", worker.url),))
    res = fleet.drain(fleet.RouterClient(router.url, poll_interval_s=0.01), pair, timeout_s=0.3)
    assert not res.ok and "running=2" in res.idle.describe() and "http_active=2" in res.idle.describe()


def test_pair_canary_sends_what_the_router_sends() -> None:
    prefill, decode = FakeWorker().start(), FakeWorker().start()
    try:
        res = fleet.pair_canary(_pd_pair(prefill, decode), "m")
        assert res.ok and res.completion_tokens == 2
        sent_p, sent_d = prefill.chats[0], decode.chats[0]
        assert sent_p == sent_d and sent_d["bootstrap_port"] == 8998 and sent_d["bootstrap_host"] == "127.0.0.1"
    finally:
        prefill.stop()
        decode.stop()
    down = fleet.pair_canary(fleet.Pair("h", (fleet.Member("m0", "mono", "http://127.0.0.1:9"),)), "m", 2)
    assert not down.ok and "m0" in down.problem


def test_gate_router_command_knows_only_the_pair() -> None:
    pair = fleet.Pair("gpu02", (fleet.Member("p", "prefill", "http://10.0.0.2:30000", bootstrap_port=8998),
                                fleet.Member("d", "decode", "http://10.0.0.2:30001")))
    cmd = fleet.gate.router_command(pair, 1234, 1235, "py")
    assert cmd[cmd.index("--prefill") + 1:cmd.index("--prefill") + 3] == ["http://10.0.0.2:30000", "8998"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and "--worker-urls" not in cmd
    mono = fleet.gate.router_command(fleet.Pair("h", (fleet.Member("m", "mono", "http://10.0.0.3:30000"),)), 1, 2)
    assert "--pd-disaggregation" not in mono and mono[mono.index("--worker-urls") + 1] == "http://10.0.0.3:30000"


def test_a_gate_router_whose_package_is_missing_is_refused_naming_the_fix(tmp_path: Path) -> None:
    pair = fleet.Pair("gpu02", (fleet.Member("m", "mono", "http://127.0.0.1:9"),))
    router = fleet.gate.TempRouter(pair, module="pdfleet_no_such_router.launch_router", log=tmp_path / "router.log")
    with pytest.raises(fleet.gate.GateError, match=r"pdfleet_no_such_router is not installed in this Python.*"
                                                   r"reinstall pdfleet in .*or give the gateway venv's Python"):
        router.start()
    assert router.proc is None and not (tmp_path / "router.log").exists()  # nothing was started


# A stand-in for the gateway's Python: whatever `-m MODULE` it is given, it serves 200 on every GET at --port.
FAKE_ROUTER = """#!{python}
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        print("served", *args, flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_the_gate_routers_log_is_removed_when_it_stops_and_kept_when_it_fails(tmp_path: Path) -> None:
    import sys
    pair = fleet.Pair("gpu02", (fleet.Member("m", "mono", "http://127.0.0.1:9"),))
    fake = tmp_path / "python"
    fake.write_text(FAKE_ROUTER.format(python=sys.executable))
    fake.chmod(0o755)
    with fleet.gate.temp_router(pair, python=str(fake)) as router:
        log = router.log
        assert log.exists() and log.stat().st_mode & 0o077 == 0  # private while it runs
    assert router.proc is not None and router.proc.poll() is not None and not log.exists()
    failing = fleet.gate.TempRouter(pair, python="/bin/false")
    with pytest.raises(fleet.gate.GateError, match=r"gate router for gpu02 exited 1.*its whole log: "), failing:
        pass
    assert failing.log.exists()  # named in the error, left for the operator
    failing.log.unlink()


def test_gate_settings_are_short_and_overridable() -> None:
    s = fleet.gate_settings(cycles=2, skip=["bench", "cascade"])
    assert s.cycles == 2 and s.skip == ("bench", "cascade") and fleet.gate_settings().window_s < 20


def test_http_active_parsing() -> None:
    assert fleet_load.http_active("") is None
    assert fleet_load.http_active("# TYPE sglang:http_requests_active gauge\n") == 0.0
    text = metrics(active={"/generate": 2, "/health": 3, "/v1/completions": 1})
    assert fleet_load.http_active(text) == 3.0


def _halves(client: fleet.RouterClient) -> tuple[list[fleet.WorkerSpec], list[fleet.WorkerSpec]]:
    """A swap's two halves, one pair each: the old one (node3's) added to the router, the new one (node1's) not."""
    old = [fleet.WorkerSpec("http://10.0.0.3:30000", "prefill", 8998),
           fleet.WorkerSpec("http://10.0.0.3:30001", "decode")]
    new = [fleet.WorkerSpec("http://10.0.0.1:30000", "prefill", 8998),
           fleet.WorkerSpec("http://10.0.0.1:30001", "decode")]
    for spec in old:
        client.add(spec, wait_s=5)
    return old, new


Listing = list[fleet.RouterWorker]


def _listings(client: fleet.RouterClient) -> tuple[list[Listing], Callable[[], Listing]]:
    """Record every listing the client reads from now on; returns them and the unrecorded listing call."""
    seen: list[Listing] = []
    real = client.workers

    def watched() -> Listing:
        out = real()
        seen.append(out)
        return out

    client.workers = watched  # type: ignore[method-assign]
    return seen, real


def test_swap_removes_the_old_half_before_adding_the_new(router: FakeRouter) -> None:
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    old, new = _halves(client)
    router.calls.clear()
    res = client.swap([s.url for s in old], new, wait_s=5)
    changes = [c.split()[0] for c in router.calls if not c.startswith("GET")]
    assert changes == ["DELETE", "DELETE", "POST", "POST"]  # never both halves listed
    assert {w.spec for w in client.workers()} == set(new) and res["gap_s"] >= 0 and res["added"]


def test_swap_on_smg_adds_the_new_half_once_the_old_is_draining(router: FakeRouter) -> None:
    """smg's draining state takes a worker out of selection at once: the additions need not wait for the listing
    to drop it (its drain settle), and no listing ever has both halves selectable; the swap returns once the old
    half is gone."""
    router.smg = True
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    old, new = _halves(client)
    listings, real = _listings(client)
    res = client.swap([s.url for s in old], new, wait_s=5)
    olds, news = {s.url for s in old}, {s.url for s in new}
    seen = [{w.spec.url: w.status for w in listing} for listing in listings]
    assert any(news & set(snap) and olds & set(snap) for snap in seen), "the additions waited for the old to go"
    for snap in seen:
        selectable = {u for u, st in snap.items() if st == "ready"}
        assert not (selectable & olds and selectable & news), snap
    assert {w.spec.url for w in real()} == news and res["gap_s"] >= 0


def test_swap_with_cohorts_on_smg_labels_both_sets_and_removes_the_old_only_once_the_new_serves(
    router: FakeRouter,
) -> None:
    """The cohort swap: the old set is labelled with its pairing protocol before anything is added, the new set is
    added with its own and confirmed ready, and only then is the old set removed: some set always serves, and
    every worker selectable next to another set carries its own protocol (smg pairs only equal ones)."""
    router.smg = True
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    old, new = _halves(client)
    router.calls.clear()
    seen, real = _listings(client)
    cohorts = (fleet.cohort_label("0.5.15.post1"), fleet.cohort_label("0.5.23"))
    res = client.swap([s.url for s in old], new, wait_s=5, cohorts=cohorts)
    changes = [c.split()[0] for c in router.calls if not c.startswith("GET")]
    assert changes == ["PATCH", "PATCH", "POST", "POST", "DELETE", "DELETE"], changes
    posted = [json.loads(c.split(" ", 2)[2]) for c in router.calls if c.startswith("POST")]
    assert all(b["labels"] == {"pairing_protocol": "sglang-0.5.23"} for b in posted), posted
    for snap in seen:
        ready = [w for w in snap if w.status == "ready"]
        assert ready, "a listing with nobody to serve"
        if len({w.spec.pairing for w in ready}) > 1:  # two cohorts selectable: every one labelled
            assert all(w.spec.pairing in cohorts for w in ready), snap
    assert {w.spec.url for w in real()} == {s.url for s in new}
    assert res["gap_s"] == 0.0 and res["cohorts"] == list(cohorts)


def test_adding_a_worker_smg_is_still_draining_waits_for_its_removal_then_adds_it(router: FakeRouter) -> None:
    """A worker listed as draining is on its way out: "already listed" would leave it to vanish seconds later."""
    router.smg = True
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    spec = fleet.WorkerSpec("http://10.0.0.3:30001", "decode")
    first, _ = client.add(spec, wait_s=5)
    client._call("DELETE", f"/workers/{first.id}")
    client._wait("draining", lambda: (w := client.find(spec.url)) is not None and w.status == "draining", 5)
    again, changed = client.add(spec, wait_s=5)
    assert changed and again.id != first.id and again.status == "ready"
    for _ in range(10):  # the old entry's removal is long done: the new one stays
        assert client.find(spec.url) is not None


def test_swap_with_cohorts_on_sglang_router_is_the_swap_with_a_gap(router: FakeRouter) -> None:
    """sglang-router 0.3.2 lists no states and has no labels: the cohorts are ignored, old out before new in."""
    client = fleet.RouterClient(router.url, poll_interval_s=0.01)
    client.add(fleet.WorkerSpec("http://10.0.0.3:30001", "decode"), wait_s=5)
    router.calls.clear()
    res = client.swap(["http://10.0.0.3:30001"], [fleet.WorkerSpec("http://10.0.0.1:30001", "decode")], wait_s=5,
                      cohorts=("a", "b"))
    assert [c.split()[0] for c in router.calls if not c.startswith("GET")] == ["DELETE", "POST"]
    assert "cohorts" not in res


def test_cross_pairs_pair_each_prefill_with_the_other_hosts_decodes() -> None:
    a = fleet.Pair("a", (fleet.Member("pa", "prefill", "http://a:1", bootstrap_port=1), fleet.Member("da", "decode", "http://a:2")))
    b = fleet.Pair("b", (fleet.Member("pb", "prefill", "http://b:1", bootstrap_port=1), fleet.Member("db", "decode", "http://b:2")))
    got = {(p.host, p.members[0].name, p.members[1].name) for p in fleet.cross_pairs([a, b])}
    assert got == {("a>b", "pa", "db"), ("b>a", "pb", "da")}
    assert fleet.cross_pairs([a]) == []


def test_readd_checks_cross_host_pairings(router: FakeRouter) -> None:
    workers = [FakeWorker().start() for _ in range(3)]
    try:
        for w in workers:
            w.loads, w.metrics_text = sglang_loads(), metrics(active={}, requests_total=1)
        pair = _pd_pair(workers[0], workers[1])
        other_ok = fleet.Pair("gpu02", (fleet.Member("p2", "prefill", workers[2].url, "gpu02", "127.0.0.1", 8998),
                                        fleet.Member("d2", "decode", workers[2].url, "gpu02", "127.0.0.1")))
        other_dead = fleet.Pair("gpu03", (fleet.Member("p3", "prefill", workers[2].url, "gpu03", "127.0.0.1", 8998),
                                          fleet.Member("d3", "decode", "http://127.0.0.1:9", "gpu03", "127.0.0.1")))
        client = fleet.RouterClient(router.url, poll_interval_s=0.01)
        count = [1]

        def route() -> None:  # the router sends the probe to this pair: its counters move
            count[0] += 1
            for w in workers[:2]:
                w.metrics_text = metrics(active={}, requests_total=count[0])

        router.on_chat = route
        sent = len(workers[1].chats)
        ok = fleet.readd(client, pair, None, "m", confirm_timeout_s=5, others=[other_ok])
        assert ok.confirmed, ok.problems
        assert len(workers[1].chats) > sent  # the other host's prefill was paired with this decode
        bad = fleet.readd(client, pair, None, "m", confirm_timeout_s=5, probe_deadline_s=2, others=[other_dead])
        assert not bad.confirmed and bad.problems[0].startswith("not added: cross pair gpu01>gpu03: d3"), bad.problems
        assert bad.added == [] and bad.probes == 0
    finally:
        for w in workers:
            w.stop()
