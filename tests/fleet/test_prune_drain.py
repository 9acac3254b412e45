"""The units role's drain step (pdfleet.prune.drain.drain_stale) on fakes: a stale worker leaves the router and is
waited for until idle; a URL the plan gives to a successor stays in the router; a silent one is not waited for."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from pdfleet.prune.drain import drain_stale

from .fakes import FakeRouter, FakeWorker, metrics, sglang_loads


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    fake = FakeRouter(lag=1).start()
    yield fake
    fake.stop()


def _worker(busy: bool = False) -> FakeWorker:
    return FakeWorker(loads=sglang_loads(running=1 if busy else 0), metrics_text=metrics(active={})).start()


def _listed(router: FakeRouter, url: str) -> None:
    router.workers.append({"id": "w-" + url[-5:], "url": url, "worker_type": "decode", "priority": 50, "cost": 1.0,
                           "is_healthy": True, "load": 0})


def test_a_stale_worker_leaves_the_router_then_goes_idle(router: FakeRouter) -> None:
    stale, kept = _worker(busy=True), _worker()
    _listed(router, stale.url)
    _listed(router, kept.url)
    threading.Timer(1.0, lambda: setattr(stale, "loads", sglang_loads())).start()  # its last request ends
    report = drain_stale(router.url, [(stale.url, "decode")], [kept.url], timeout_s=20)
    entry = report["workers"][0]  # type: ignore[index]
    assert entry["removed_from_router"] is True and entry["idle"] is True and entry["waited_s"] >= 0.5
    assert [w["url"] for w in router.workers] == [kept.url]
    assert report["changed"] is True
    assert report["summary"][0].startswith(f"{stale.url} (decode): left the router; idle after ")  # type: ignore[index]
    stale.stop()
    kept.stop()


def test_a_busy_worker_is_reported_after_the_timeout(router: FakeRouter) -> None:
    busy = _worker(busy=True)
    _listed(router, busy.url)
    entry = drain_stale(router.url, [(busy.url, "decode")], [], timeout_s=1.5)["workers"][0]  # type: ignore[index]
    assert entry["removed_from_router"] is True and entry["idle"] is False
    assert "still busy after 1.5 s" in str(entry["note"]) and "stopped anyway" in str(entry["note"])
    busy.stop()


def test_a_url_the_plan_reuses_stays_in_the_router(router: FakeRouter) -> None:
    worker = _worker(busy=True)
    _listed(router, worker.url)
    report = drain_stale(router.url, [(worker.url, "decode")], [worker.url + "/"], timeout_s=5)
    assert report["changed"] is False and [w["url"] for w in router.workers] == [worker.url]
    assert "the plan gives this URL to another unit" in str(report["workers"][0]["note"])  # type: ignore[index]
    worker.stop()


def test_a_worker_that_does_not_answer_is_not_waited_for(router: FakeRouter) -> None:
    gone = _worker()
    url = gone.url
    gone.stop()
    entry = drain_stale(router.url, [(url, "prefill")], [], timeout_s=60)["workers"][0]  # type: ignore[index]
    assert entry["idle"] is None and "not answering" in str(entry["note"])


def test_the_command_reads_its_request_on_stdin(router: FakeRouter) -> None:
    worker = _worker()
    _listed(router, worker.url)
    request = {"router": router.url, "timeout_s": 10, "keep": [],
               "workers": [{"url": worker.url, "role": "decode", "kind": "worker", "name": "pdfleet-decodeB"}]}
    proc = subprocess.run([sys.executable, "-m", "pdfleet.prune", "drain"], input=json.dumps(request),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changed"] is True and router.workers == []
    bad = subprocess.run([sys.executable, "-m", "pdfleet.prune", "drain"], input="[1]", capture_output=True,
                         text=True, timeout=60, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("pdfleet.prune drain: bad request on stdin")
    worker.stop()
