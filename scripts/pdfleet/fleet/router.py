"""The gateway's worker API (smg 1.13.0; sglang-router 0.3.2 too): list, add and remove workers, keeping each
one's spec.

Both serve ``GET /workers`` (id, url, worker_type, bootstrap_port, priority, cost, is_healthy, load; smg adds each
worker's ``status``: pending, ready, not_ready, failed or draining, and only a ready one gets traffic),
``POST /workers`` and ``DELETE /workers/{id}``; both changes are queued jobs answered 202 before they take effect,
so every change here polls ``GET /workers`` until the listing shows it (operations-facts.md). smg's removal marks
the worker draining (no new requests) and drops it from the listing about 5 s later; neither waits for requests
in flight: drain with ``pdfleet.fleet.load`` afterwards. Re-adding a URL that is already listed is answered 409
(smg) or 202 with the existing id (0.3.2): both mean present.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from pdfleet.errors import PdfleetError
from pdfleet.fleet.http import HTTPError, call

# smg's worker label that names a worker's pairing protocol (smg 1.13.0, PdPairing::derive): when a prefill and a
# decode both carry one, smg pairs them only if they are equal (a request with no such pair gets 503
# no_compatible_pd_pair). The swap labels each SGLang version's cohort with its own (cohort_label).
PAIRING_LABEL = "pairing_protocol"
DEFAULT_PRIORITY = 50  # 0.3.2's default; only a different value is sent back when re-adding
DEFAULT_COST = 1.0


def cohort_label(sglang_version: str) -> str:
    """The pairing protocol of the workers of one SGLang version (their KV transfer must never meet another's)."""
    return f"sglang-{sglang_version}"


class RouterError(PdfleetError):
    """The router did not answer, refused a change, or did not show it in time; the message says which."""


@dataclass(frozen=True)
class WorkerSpec:
    """Everything needed to add a worker back exactly as it was listed."""

    url: str
    worker_type: str  # prefill | decode | regular (a mono worker)
    bootstrap_port: int | None = None
    priority: int = DEFAULT_PRIORITY
    cost: float = DEFAULT_COST
    # smg's pairing protocol (label ``pairing_protocol``): a prefill and a decode that both carry one are paired only
    # when they are equal (PAIRING_LABEL); "" carries none (pairs with anything).
    pairing: str = ""

    def body(self) -> dict[str, Any]:
        """The ``POST /workers`` body."""
        out: dict[str, Any] = {"url": self.url}
        if self.pairing:
            out["labels"] = {PAIRING_LABEL: self.pairing}
        if self.worker_type in ("prefill", "decode"):
            out["worker_type"] = self.worker_type
        if self.bootstrap_port is not None:
            out["bootstrap_port"] = self.bootstrap_port
        if self.priority != DEFAULT_PRIORITY:
            out["priority"] = self.priority
        if self.cost != DEFAULT_COST:
            out["cost"] = self.cost
        return out

    def to_dict(self) -> dict[str, Any]:
        out = {"url": self.url, "worker_type": self.worker_type, "bootstrap_port": self.bootstrap_port,
               "priority": self.priority, "cost": self.cost}
        return {**out, "pairing": self.pairing} if self.pairing else out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkerSpec:
        """From a spec's own dict or a ``GET /workers`` entry (whose labels carry the pairing protocol)."""
        bp = d.get("bootstrap_port")
        labels = d.get("labels") if isinstance(d.get("labels"), dict) else {}
        return cls(url=str(d["url"]).rstrip("/"), worker_type=str(d.get("worker_type") or "regular"),
                   bootstrap_port=int(bp) if bp is not None else None,
                   priority=int(d.get("priority", DEFAULT_PRIORITY)), cost=float(d.get("cost", DEFAULT_COST)),
                   pairing=str(d.get("pairing") or labels.get(PAIRING_LABEL) or ""))


@dataclass(frozen=True)
class RouterWorker:
    """One entry of ``GET /workers``."""

    id: str
    spec: WorkerSpec
    healthy: bool
    load: int | None
    # smg's worker state (pending, ready, not_ready, failed, draining); sglang-router 0.3.2 has none: its health
    status: str = ""
    stateful: bool = False  # the listing gave a status (smg)

    @classmethod
    def from_listing(cls, entry: dict[str, Any]) -> RouterWorker:
        load = entry.get("load")
        healthy = bool(entry.get("is_healthy", False))
        status = str(entry.get("status") or ("ready" if healthy else "unhealthy"))
        return cls(id=str(entry.get("id", "")), spec=WorkerSpec.from_dict(entry), healthy=healthy,
                   load=int(load) if load is not None else None, status=status, stateful="status" in entry)


class RouterClient:
    """The production router (or a temporary one) at ``url``; ``api_key`` if it was started with one."""

    def __init__(self, url: str, api_key: str | None = None, timeout_s: float = 5.0,
                 poll_interval_s: float = 0.25) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        try:
            return call(method, self.url + path, body, self.timeout_s, self.api_key)
        except HTTPError as e:
            raise RouterError(f"router {self.url} did not answer ({e}); check pdfleet-router.service") from None

    def workers(self) -> list[RouterWorker]:
        """The router's current worker list."""
        status, data = self._call("GET", "/workers")
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("workers"), list):
            raise RouterError(f"router {self.url}: GET /workers answered {status}: {str(data)[:200]}")
        return [RouterWorker.from_listing(e) for e in data["workers"] if isinstance(e, dict) and e.get("url")]

    def find(self, url: str) -> RouterWorker | None:
        url = url.rstrip("/")
        return next((w for w in self.workers() if w.spec.url == url), None)

    def ready(self) -> bool:
        """``/readiness`` is 200: the router has healthy workers of every kind it needs."""
        try:
            return self._call("GET", "/readiness")[0] == 200
        except RouterError:
            return False

    def _wait(self, what: str, done: Any, wait_s: float) -> Any:
        deadline = time.monotonic() + wait_s
        while True:
            result = done()
            if result:
                return result
            if time.monotonic() >= deadline:
                raise RouterError(f"router {self.url}: {what} not shown by GET /workers after {wait_s:g} s")
            time.sleep(self.poll_interval_s)

    def add(self, spec: WorkerSpec, wait_s: float = 30.0) -> tuple[RouterWorker, bool]:
        """Add ``spec`` unless it is listed; wait until it is. Returns (entry, changed). A worker listed as draining
        (smg: a removal under way, which drops it seconds later) is not present: wait until it is gone, then add."""
        present = self.find(spec.url)
        if present is not None and present.status == "draining":
            self._wait(f"the end of {spec.url}'s removal (draining)", lambda: self.find(spec.url) is None, wait_s)
            present = None
        if present is not None:
            return present, False
        status, data = self._call("POST", "/workers", spec.body())
        if status not in (200, 201, 202, 409):
            raise RouterError(f"router {self.url}: POST /workers {spec.body()} answered {status}: {str(data)[:200]}")
        return self._wait(f"worker {spec.url}", lambda: self.find(spec.url), wait_s), True

    def queue_add(self, spec: WorkerSpec) -> None:
        """``POST /workers`` for ``spec`` without waiting (a queued job: ``wait_listed`` confirms a batch); an
        answer that the URL is listed already (409) is fine."""
        status, data = self._call("POST", "/workers", spec.body())
        if status not in (200, 201, 202, 409):
            raise RouterError(f"router {self.url}: POST /workers {spec.body()} answered {status}: {str(data)[:200]}")

    def wait_listed(self, urls: list[str], wait_s: float = 30.0) -> None:
        """Wait until the listing shows every one of ``urls``."""
        want = set(urls)
        self._wait("addition of " + ", ".join(sorted(want)), lambda: want <= {w.spec.url for w in self.workers()},
                   wait_s)

    def remove(self, url: str, wait_s: float = 30.0, until_gone: bool = True) -> WorkerSpec | None:
        """Remove the worker at ``url`` and wait until it is gone (``until_gone``) or at least out of selection (smg's
        draining: it takes no new request and is dropped seconds later); returns the spec it had, None if absent."""
        present = self.find(url)
        if present is None:
            return None
        status, data = self._call("DELETE", f"/workers/{present.id}")
        if status not in (200, 202, 204, 404):
            raise RouterError(f"router {self.url}: DELETE /workers/{present.id} ({url}) answered {status}: "
                              f"{str(data)[:200]}")

        def out() -> bool:
            w = self.find(url)
            return w is None or (not until_gone and w.status == "draining")

        self._wait(f"removal of {url}", out, wait_s)
        return present.spec

    def wait_gone(self, urls: list[str], wait_s: float = 30.0) -> None:
        """Wait until the listing shows none of ``urls`` (smg drops a draining worker after its drain settle)."""
        gone = set(urls)
        self._wait("removal of " + ", ".join(urls), lambda: not ({w.spec.url for w in self.workers()} & gone), wait_s)

    def label(self, worker: RouterWorker, pairing: str) -> None:
        """Set ``worker``'s pairing protocol (smg's ``PATCH /workers/{id}``, which merges labels and re-derives the
        pairing at once)."""
        status, data = self._call("PATCH", f"/workers/{worker.id}", {"labels": {PAIRING_LABEL: pairing}})
        if status not in (200, 202, 204):
            raise RouterError(f"router {self.url}: PATCH /workers/{worker.id} ({worker.spec.url}) labels answered "
                              f"{status}: {str(data)[:200]}")

    @staticmethod
    def has_states(workers: list[RouterWorker]) -> bool:
        """The listing has worker states (smg): the gateway has draining, labels and pairing protocols."""
        return any(w.stateful for w in workers)

    def _delete_all(self, urls: list[str]) -> None:
        """Queue the removal of every listed worker of ``urls`` at once (confirmed by the caller's wait)."""
        present = {w.spec.url: w for w in self.workers()}
        for url in urls:
            if url in present:
                status, data = self._call("DELETE", f"/workers/{present[url].id}")
                if status not in (200, 202, 204, 404):
                    raise RouterError(f"router {self.url}: DELETE {url} answered {status}: {str(data)[:200]}")

    def swap(self, remove_urls: list[str], add: list[WorkerSpec], wait_s: float = 30.0,
             cohorts: tuple[str, str] | None = None) -> dict[str, Any]:
        """Replace workers so that no request is ever sent to a mix of the two sets: every removal is queued at once
        and confirmed out of selection, then every addition is made and confirmed ready.

        smg marks a removed worker ``draining`` at once (it takes no new request and finishes those it holds) and
        drops it from the listing some seconds later, so the additions start as soon as no old worker is
        selectable; sglang-router 0.3.2 has no such state, so there they wait until the old ones are gone. Between
        the last old worker leaving selection and the first new one ready the router has no pair (``gap_s``,
        measured; new requests get a fast 503 there, never a mixed pair). Returns when the old ones are gone too.

        ``cohorts`` (old, new: pairing protocols, ``cohort_label``) on smg: no gap at all (``swap_cohorts``)."""
        if cohorts is not None and self.has_states(self.workers()):
            return self.swap_cohorts(remove_urls, add, cohorts, wait_s)
        t0 = time.monotonic()
        self._delete_all(remove_urls)
        gone = set(remove_urls)

        def selectable(workers: list[RouterWorker]) -> set[str]:
            return {w.spec.url for w in workers if w.status not in ("draining", "failed")} & gone

        self._wait("removal of " + ", ".join(remove_urls), lambda: not selectable(self.workers()), wait_s)
        t_removed = time.monotonic()
        for spec in add:
            if self.find(spec.url) is None:
                status, data = self._call("POST", "/workers", spec.body())
                if status not in (200, 201, 202, 409):
                    raise RouterError(f"router {self.url}: POST {spec.body()} answered {status}: {str(data)[:200]}")
        want = {s.url for s in add}
        self._wait("addition of " + ", ".join(sorted(want)),
                   lambda: want <= {w.spec.url for w in self.workers() if w.status == "ready"}, wait_s)
        t_added = time.monotonic()
        self._wait("removal of " + ", ".join(remove_urls),
                   lambda: not ({w.spec.url for w in self.workers()} & gone), wait_s)
        return {"removed": list(remove_urls), "added": sorted(want), "remove_s": round(t_removed - t0, 3),
                "gap_s": round(t_added - t_removed, 3), "total_s": round(time.monotonic() - t0, 3)}

    def swap_cohorts(self, remove_urls: list[str], add: list[WorkerSpec], cohorts: tuple[str, str],
                     wait_s: float = 30.0) -> dict[str, Any]:
        """The swap on smg with both sets serving for a moment and never paired with each other: every listed
        worker gets the old cohort's pairing protocol (confirmed in the listing before anything is added: a worker
        without one would pair with either cohort), the new set is added with the new cohort's and confirmed ready,
        and only then is the old set removed (draining: it finishes what it holds). smg pairs a prefill only with a
        decode of its own protocol, so there is always a pair to serve and never a mixed one (``gap_s`` 0;
        ``overlap_s``: both cohorts selectable)."""
        old, new = cohorts
        t0 = time.monotonic()
        adding = {spec.url for spec in add}
        for w in self.workers():
            if w.spec.url not in adding and w.spec.pairing != old:
                self.label(w, old)
        self._wait(f"pairing protocol {old} on every listed worker",
                   lambda: all(w.spec.pairing == old for w in self.workers() if w.spec.url not in adding), wait_s)
        t_labelled = time.monotonic()
        for spec in add:
            if self.find(spec.url) is None:
                body = replace(spec, pairing=new).body()
                status, data = self._call("POST", "/workers", body)
                if status not in (200, 201, 202, 409):
                    raise RouterError(f"router {self.url}: POST {body} answered {status}: {str(data)[:200]}")
        self._wait("addition of " + ", ".join(sorted(adding)) + f" as {new}",
                   lambda: adding <= {w.spec.url for w in self.workers() if w.status == "ready"
                                      and w.spec.pairing == new}, wait_s)
        t_added = time.monotonic()
        self._delete_all(remove_urls)
        gone = set(remove_urls)
        self._wait("removal of " + ", ".join(remove_urls) + " from selection",
                   lambda: not {w.spec.url for w in self.workers() if w.status == "ready"} & gone, wait_s)
        t_out = time.monotonic()
        self._wait("removal of " + ", ".join(remove_urls),
                   lambda: not ({w.spec.url for w in self.workers()} & gone), wait_s)
        return {"removed": list(remove_urls), "added": sorted(adding), "cohorts": [old, new],
                "label_s": round(t_labelled - t0, 3), "remove_s": round(t_out - t_added, 3), "gap_s": 0.0,
                "overlap_s": round(t_out - t_added, 3), "total_s": round(time.monotonic() - t0, 3)}
