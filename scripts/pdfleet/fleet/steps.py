"""The steps every fleet caller runs on a pair: out of the router and drained, back in and confirmed.

Each step returns a result with what it measured (for reports and failure messages) and raises
``FleetError`` only when it could not run at all.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdfleet.errors import PdfleetError
from pdfleet.fleet.canary import chat_body, cross_pairs, pair_canary
from pdfleet.fleet.http import HTTPError, call
from pdfleet.fleet.load import IdleResult, wait_idle
from pdfleet.fleet.pairs import Pair
from pdfleet.fleet.router import RouterClient, WorkerSpec
from pdfleet.verify.metrics import parse_prometheus

REQUEST_COUNTER = "sglang:num_requests_total"  # the worker's own count (tokenizer metrics, both versions)


class FleetError(PdfleetError):
    """A fleet step could not run (router unreachable, a change not applied in time)."""


@dataclass
class DrainResult:
    """Which workers left the router (with the specs to add them back) and whether they went idle."""

    host: str
    removed: list[WorkerSpec]
    idle: IdleResult
    removed_s: float

    @property
    def ok(self) -> bool:
        return self.idle.idle

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "removed": [s.to_dict() for s in self.removed], "idle": self.idle.idle,
                "removed_s": round(self.removed_s, 3), "idle_wait_s": round(self.idle.waited_s, 3),
                "loads": self.idle.to_dict()["loads"], "busy_at_start": self.idle.busy_at_start}


def remove_pair(router: RouterClient, pair: Pair, wait_s: float = 30.0, until_gone: bool = True) -> list[WorkerSpec]:
    """Take every worker of ``pair`` out of the router (no-op for those not listed); their exact specs. Without
    ``until_gone`` a worker smg lists as draining counts as out (it takes no new request).

    Decodes go first: from then on no new request can be paired with this host's prefill through them, and
    the router's own decode choice never lands here while the prefill is still being removed.
    """
    order = sorted(pair.members, key=lambda m: {"decode": 0, "mono": 1, "prefill": 2}.get(m.role, 3))
    removed = []
    for m in order:
        spec = router.remove(m.url, wait_s, until_gone)
        if spec is not None:
            removed.append(spec)
    return removed


def drain(router: RouterClient, pair: Pair, timeout_s: float, wait_s: float = 30.0,
          progress: Callable[[IdleResult], None] | None = None) -> DrainResult:
    """Remove ``pair`` from the router, then wait (up to ``timeout_s``) until its workers say idle. On smg the wait
    on the workers' own numbers starts once the gateway marks them draining (no new request reaches them), and the
    drain returns once the gateway has dropped them too (its drain settle runs beside our wait)."""
    t0 = time.monotonic()
    removed = remove_pair(router, pair, wait_s, until_gone=False)
    removed_s = time.monotonic() - t0
    idle = wait_idle([(m.url, m.role) for m in pair.members], timeout_s, progress=progress)
    router.wait_gone([s.url for s in removed], wait_s)
    return DrainResult(pair.host, removed, idle, removed_s)


def request_counts(pair: Pair, timeout_s: float = 5.0) -> dict[str, float | None]:
    """Each member's own request counter (None when it cannot be read)."""
    out: dict[str, float | None] = {}
    for m in pair.members:
        try:
            status, text = call("GET", m.url + "/metrics", timeout_s=timeout_s)
        except HTTPError:
            out[m.url] = None
            continue
        out[m.url] = parse_prometheus(text).get(REQUEST_COUNTER) if status == 200 and isinstance(text, str) else None
    return out


def _moved(before: float | None, after: float | None) -> bool:
    return after is not None and after > (before or 0.0)


@dataclass
class ReaddResult:
    """Which specs were added, and whether the production router then sent each member a request."""

    host: str
    added: list[str]
    confirmed: bool
    before: dict[str, float | None]
    after: dict[str, float | None]
    probes: int
    seconds: float
    problems: list[str] = field(default_factory=list)
    # the pairing samples, in order: each read of the members' counters ({"t": epoch, "counts": {url: n}}) and
    # each probe through the production router ({"t": epoch, "status": HTTP status or 0, "s": seconds}); the
    # report pages draw them (at most SAMPLES_MAX)
    samples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "added": self.added, "confirmed": self.confirmed, "before": self.before,
                "after": self.after, "probes": self.probes, "seconds": round(self.seconds, 3),
                "problems": self.problems, "samples": self.samples}


SAMPLES_MAX = 400


def _sample(samples: list[dict[str, Any]], **values: Any) -> None:
    if len(samples) < SAMPLES_MAX:
        samples.append({"t": round(time.time(), 3), **values})


def readd(router: RouterClient, pair: Pair, specs: list[WorkerSpec] | None, model: str,
          confirm_timeout_s: float = 60.0, wait_s: float = 30.0, probe_deadline_s: float = 30.0,
          probe_interval_s: float = 0.25, others: list[Pair] | None = None) -> ReaddResult:
    """Add the pair's workers back (``specs`` as they were listed; the plan's when None) and confirm routing.

    Prefills go first, so the router never has this host's decode without a prefill to pair it with. Routing
    is confirmed when every member's own request counter moved: requests (client traffic or probes sent
    here through the production router) reached it. With ``others`` (the other pairs in the router), a real
    request through every cross-host pairing of this pair with them must answer first, straight to the
    workers, before anything is added: the router pairs across hosts, and a decode holding stale state about
    this host's restarted prefill hangs only those (seen on the sim fleet).
    """
    t0 = time.monotonic()
    by_url = {s.url: s for s in specs or []}
    order = sorted(pair.members, key=lambda m: {"prefill": 0, "mono": 1, "decode": 2}.get(m.role, 3))
    samples: list[dict[str, Any]] = []
    before = request_counts(pair)
    _sample(samples, counts=before)
    # before the router sees it: the cross-host pairings, straight to the workers (no router needed)
    problems = []
    for cross in cross_pairs([pair, *(others or [])]):
        if pair.host in cross.host.split(">"):
            c = pair_canary(cross, model, probe_deadline_s)
            if not c.ok:
                problems.append(f"cross pair {cross.host}: {c.problem} (HTTP {c.status}, {c.latency_s:.1f} s)")
    if problems:
        return ReaddResult(pair.host, [], False, before, before, 0, time.monotonic() - t0,
                           ["not added: " + problems[0], *problems[1:]], samples)
    added = []
    for m in order:
        _, changed = router.add(by_url.get(m.url, m.spec()), wait_s)
        if changed:
            added.append(m.url)
    probes = 0
    after = before
    deadline = time.monotonic() + confirm_timeout_s
    while True:
        after = request_counts(pair)
        _sample(samples, counts=after)
        moved = {u: _moved(before[u], after[u]) for u in after}
        if all(moved.values()):
            return ReaddResult(pair.host, added, True, before, after, probes, time.monotonic() - t0, [], samples)
        if time.monotonic() >= deadline:
            stuck = [u for u, ok in moved.items() if not ok]
            return ReaddResult(pair.host, added, False, before, after, probes, time.monotonic() - t0,
                               [f"{u}: {REQUEST_COUNTER} stayed at {after[u]} after {probes} probes "
                                f"through {router.url} in {confirm_timeout_s:g} s" for u in stuck], samples)
        p0, status = time.monotonic(), 0
        with contextlib.suppress(HTTPError):  # the counters decide; a failed probe just did not land here
            status, _ = call("POST", router.url + "/v1/chat/completions", chat_body(model, 4), probe_deadline_s,
                             router.api_key)
        _sample(samples, status=status, s=round(time.monotonic() - p0, 3))
        probes += 1
        time.sleep(probe_interval_s)
