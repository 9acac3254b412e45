"""Request lifecycle of a simulated worker, in the shape of SGLang's scheduler queues.

Each request runs in its own task, independent of the HTTP connection that carried it (as in
SGLang, where the scheduler keeps going until an ``AbortReq`` arrives). Stages and the SGLang queue
they stand for:

* prefill: ``bootstrap`` (waiting for the decode's transfer info: the room is not yet
  ``WaitingForInput``) → ``waiting`` (queue) → ``running`` (the forward pass, one at a time) →
  ``inflight`` (KV being handed to the decode) → done.
* decode: ``prealloc`` (resolving the prefill, waiting for a running slot) → ``transfer`` (transfer
  info sent, waiting for the KV) → ``running`` (streaming tokens) → done.
* unified (no PD): ``waiting`` → ``running`` (prefill then decode) → done.

Aborts follow SGLang: a request aborted while its decode-side transfer is pending pushes the
version's ``ABORT`` frames to the prefill rank socket and fails with ``Aborted by AbortReq.``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdfleet_sim.worker import engine
from pdfleet_sim.worker.args import SimSettings, WorkerArgs
from pdfleet_sim.worker.kv import KVPoll, PrefillKV
from pdfleet_sim.worker.metrics import Metrics
from pdfleet_sim.worker.pd import BootstrapError, DecodeLink, PrefillLink, PrefillTarget

logger = logging.getLogger("pdfleet_sim.worker.scheduler")

ABORT_REASON = "Aborted by AbortReq."
POLL_INTERVAL_S = 0.005
THROUGHPUT_WINDOW_S = 5.0
BOOTSTRAP_RETRY_S = 1.0
BOOTSTRAP_PENDING = frozenset({KVPoll.Bootstrapping})
TRANSFER_PENDING = frozenset({KVPoll.Bootstrapping, KVPoll.WaitingForInput, KVPoll.Transferring})


@dataclass
class Event:
    """One item the request task hands to the HTTP layer."""

    kind: str  # "token" | "finish" | "error"
    token_id: int = 0
    piece: str = ""
    status: int = 200
    message: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Request:
    plan: engine.SamplingPlan
    stage: str = "new"
    created: float = field(default_factory=time.monotonic)
    out: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None
    completion_tokens: int = 0
    first_token_at: float | None = None
    target: PrefillTarget | None = None
    abort_notified: bool = False
    aborted: bool = False

    @property
    def rid(self) -> str:
        return self.plan.rid

    @property
    def room(self) -> int:
        assert self.plan.bootstrap_room is not None
        return self.plan.bootstrap_room


class Scheduler:
    """Owns the queues of one simulated worker."""

    def __init__(
        self,
        args: WorkerArgs,
        settings: SimSettings,
        metrics: Metrics,
        prefill_kv: PrefillKV | None = None,
        prefill_link: PrefillLink | None = None,
        decode_link: DecodeLink | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.args = args
        self.settings = settings
        self.metrics = metrics
        self.kv = prefill_kv
        self.prefill_link = prefill_link
        self.decode_link = decode_link
        self.mode = args.disaggregation_mode
        self._clock = clock
        self._requests: dict[str, Request] = {}
        self._forward_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(args.effective_max_running_requests())
        self._room_waiters: dict[int, tuple[frozenset[int], asyncio.Future[int]]] = {}
        self._poller: asyncio.Task[None] | None = None
        self._token_times: deque[float] = deque()
        # Simulator-only (``/pdfleet/sim``): prefill forward passes run, so tests can tell a request that was
        # dropped from the waiting queue (SGLang's "Abort queued request.") from one that was computed.
        self.forward_passes = 0

    # ----- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self.kv is not None:
            self._poller = asyncio.get_running_loop().create_task(self._poll_rooms())

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        for req in list(self._requests.values()):
            if req.task is not None:
                req.task.cancel()

    def submit(self, plan: engine.SamplingPlan) -> Request:
        if self.args.is_pd and not plan.has_bootstrap:
            raise engine.RequestError(
                f"This is a {self.mode} server in PD mode: the request needs bootstrap_host and "
                "bootstrap_room (send it through the router)"
            )
        if plan.rid in self._requests:
            raise engine.RequestError(f"Duplicate request ID: {plan.rid}")
        req = Request(plan=plan)
        self._requests[req.rid] = req
        self.metrics.inc("sglang:num_requests_total")
        self.metrics.inc("sglang:prompt_tokens_total", plan.prompt_tokens)
        body = {"prefill": self._run_prefill, "decode": self._run_decode}.get(self.mode, self._run_unified)
        req.task = asyncio.get_running_loop().create_task(self._guard(req, body))
        return req

    def abort(self, rid: str) -> bool:
        """SGLang's AbortReq for one request id; False when the request already ended."""
        req = self._requests.get(rid)
        if req is None or req.task is None or req.task.done():
            return False
        req.aborted = True
        self.metrics.inc("sglang:num_aborted_requests_total")
        req.task.cancel()
        return True

    def abort_all(self) -> int:
        return sum(self.abort(rid) for rid in list(self._requests))

    # ----- gauges ----------------------------------------------------------------------------
    def stage_counts(self) -> Counter[str]:
        return Counter(r.stage for r in self._requests.values())

    def gauges(self) -> dict[str, float]:
        c = self.stage_counts()
        self._prune_token_times(self._clock())
        tokens = len(self._token_times)
        return {
            "sglang:num_running_reqs": float(c["running"]),
            "sglang:num_queue_reqs": float(c["waiting"]),
            "sglang:num_prefill_bootstrap_queue_reqs": float(c["bootstrap"]),
            "sglang:num_prefill_inflight_queue_reqs": float(c["inflight"]),
            "sglang:num_decode_prealloc_queue_reqs": float(c["prealloc"]),
            "sglang:num_decode_transfer_queue_reqs": float(c["transfer"]),
            "sglang:gen_throughput": tokens / THROUGHPUT_WINDOW_S,
            "sglang:token_usage": 0.0,
        }

    def _prune_token_times(self, now: float) -> None:
        while self._token_times and now - self._token_times[0] > THROUGHPUT_WINDOW_S:
            self._token_times.popleft()

    def load(self) -> dict[str, int]:
        c = self.stage_counts()
        running = c["running"] + c["inflight"]
        waiting = sum(c.values()) - running
        return {"num_running_reqs": running, "num_waiting_reqs": waiting}

    # ----- request bodies --------------------------------------------------------------------
    async def _guard(self, req: Request, body: Callable[[Request], Any]) -> None:
        try:
            await body(req)
        except asyncio.CancelledError:
            if not req.aborted:  # the worker is shutting down
                req.out.put_nowait(Event("error", status=503, message="The server is shutting down."))
                raise
            await self._on_abort(req)
        except Exception as e:  # a bug in the simulator must not hang the client
            logger.exception("Simulated request %s failed", req.rid)
            req.out.put_nowait(Event("error", status=500, message=f"simulator error: {e}"))
        finally:
            self._requests.pop(req.rid, None)
            if self.decode_link is not None and req.plan.bootstrap_room is not None:
                self.decode_link.forget_room(req.plan.bootstrap_room)

    def _finish(self, req: Request) -> None:
        meta = {
            "id": req.rid,
            "finish_reason": engine.finish_reason(req.plan.max_new_tokens),
            "prompt_tokens": req.plan.prompt_tokens,
            "completion_tokens": req.completion_tokens,
            "cached_tokens": 0,
            "e2e_latency": self._clock() - req.created,
        }
        req.out.put_nowait(Event("finish", meta=meta))

    def _fail(self, req: Request, message: str, status: int = 500) -> None:
        req.out.put_nowait(Event("error", status=status, message=message))

    async def _emit_tokens(self, req: Request, count: int) -> None:
        interval = engine.token_interval(self.settings)
        start = self._clock()
        for i, (tid, piece) in enumerate(engine.output_tokens(count)):
            # Pace against the start time so slow event loops do not drift the rate down.
            delay = start + (i + 1) * interval - self._clock()
            if delay > 0:
                await asyncio.sleep(delay)
            req.completion_tokens += 1
            if req.first_token_at is None:
                req.first_token_at = self._clock()
            self.metrics.inc("sglang:generation_tokens_total")
            now = self._clock()
            self._token_times.append(now)
            self._prune_token_times(now)
            req.out.put_nowait(Event("token", token_id=tid, piece=piece))

    async def _forward(self, req: Request) -> None:
        """One prefill forward pass; the GPU runs one at a time."""
        req.stage = "waiting"
        async with self._forward_lock:
            req.stage = "running"
            self.forward_passes += 1
            await asyncio.sleep(engine.prefill_seconds(req.plan.prompt_tokens, self.settings))

    async def _run_unified(self, req: Request) -> None:
        await self._forward(req)
        await self._emit_tokens(req, req.plan.max_new_tokens)
        self._finish(req)

    # prefill ---------------------------------------------------------------------------------
    async def _poll_rooms(self) -> None:
        """One loop polls every waiting room, as SGLang's scheduler polls its KV senders."""
        assert self.kv is not None
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            for room, (pending, fut) in list(self._room_waiters.items()):
                if fut.done():
                    continue
                status = self.kv.poll(room)
                if status not in pending:
                    fut.set_result(status)

    async def _wait_room(self, room: int, pending: frozenset[int], timeout: float | None) -> int:
        """Wait until the room's KVPoll state leaves ``pending``; return the new state."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._room_waiters[room] = (pending, fut)
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._room_waiters.pop(room, None)

    def _prefill_failure(self, req: Request, what: str, reason: str | None, level: int) -> None:
        message = f"Prefill {what} failed for request rank=0 req.rid={req.rid!r} req.bootstrap_room={req.room}"
        if reason:
            message += f" with exception KVTransferError(bootstrap_room={req.room}): {reason}"
        logger.log(level, message)
        counter = "sglang:num_bootstrap_failed_reqs_total" if what == "bootstrap" else \
            "sglang:num_transfer_failed_reqs_total"
        self.metrics.inc(counter)
        self._fail(req, message)

    def _bootstrap_timeout(self) -> float | None:
        assert self.kv is not None
        if self.settings.bootstrap_timeout_s > 0 and self.kv.supports_bootstrap_timeout:
            return self.settings.bootstrap_timeout_s
        return None  # SGLang before 0.5.18 (NIXL): a room waits for its decode forever

    async def _run_prefill(self, req: Request) -> None:
        assert self.kv is not None and self.prefill_link is not None
        room = req.room
        req.stage = "bootstrap"
        self.kv.open_room(room)
        try:
            timeout = self._bootstrap_timeout()
            try:
                status = await self._wait_room(room, BOOTSTRAP_PENDING, timeout)
            except TimeoutError:
                self.kv.abort_room(room, f"Request {room} timed out after {timeout:.1f}s in KVPoll.Bootstrapping")
                self._prefill_failure(req, "bootstrap", self.kv.failure_reason(room), logging.WARNING)
                return
            if status == KVPoll.Failed:
                self._prefill_failure(req, "bootstrap", self.kv.failure_reason(room), logging.WARNING)
                return
            await self._forward(req)
            req.stage = "inflight"
            # Read the decode peers before the transfer worker drops the room's transfer info.
            peers = self.kv.decode_peers(room)
            self.kv.start_transfer(room)
            started = self._clock()
            status = await self._wait_room(room, TRANSFER_PENDING, None)
            if status != KVPoll.Success or not peers:
                reason = self.kv.failure_reason(room) or "no decode peer registered for the room"
                self._prefill_failure(req, "transfer", reason, logging.WARNING)
                return
            self.metrics.observe_transfer((self._clock() - started) * 1000.0)
            await self.prefill_link.notify(peers, room)
            # The prefill computes the first output token; the decode streams the rest.
            req.completion_tokens = min(1, req.plan.max_new_tokens)
            self._finish(req)
        finally:
            if not req.aborted:
                self.kv.release_room(room)

    # decode ----------------------------------------------------------------------------------
    async def _resolve_prefill(self, req: Request) -> PrefillTarget:
        assert self.decode_link is not None
        host = req.plan.bootstrap_host or ""
        port = req.plan.bootstrap_port or self.args.disaggregation_bootstrap_port
        while True:
            try:
                return await self.decode_link.resolve(host, port)
            except BootstrapError as e:
                logger.error("%s (request %s; retrying)", e, req.rid)
                await asyncio.sleep(BOOTSTRAP_RETRY_S)

    async def _run_decode(self, req: Request) -> None:
        assert self.decode_link is not None
        room = req.room
        req.stage = "prealloc"
        ready = self.decode_link.kv_ready_event(room)
        req.target = await self._resolve_prefill(req)
        self.decode_link.track_room(req.target, room)
        async with self._slots:
            # The heartbeat declared the prefill dead while the request waited for a slot: a prealloc
            # request whose receiver polls Failed ends as "Decode handshake failed" (decode.py,
            # _update_handshake_waiters: 0.5.15.post1 line 671, 0.5.23 line 1158).
            lost = self.decode_link.room_failure(room)
            if lost is not None:
                self._decode_failure(req, "handshake", lost)
                return
            pages = max(1, -(-req.plan.prompt_tokens // self.args.effective_page_size()))
            await self.decode_link.send_transfer_info(req.target, room, pages)
            req.stage = "transfer"
            timeout = self.settings.waiting_timeout_s or None
            try:
                await asyncio.wait_for(ready.wait(), timeout)
            except TimeoutError:
                reason = (f"Request {room} timed out after {self.settings.waiting_timeout_s:.1f}s "
                          "in KVPoll.WaitingForInput")
                await self._decode_abort_notify(req)
                self._decode_failure(req, "transfer", reason)
                return
            lost = self.decode_link.room_failure(room)
            if lost is not None:  # transfer queue polls Failed: "Decode transfer failed" (decode.py 1689 / 2861)
                self._decode_failure(req, "transfer", lost)
                return
            req.stage = "running"
            # The first token came from the prefill with the KV; pace the rest.
            await self._emit_tokens(req, req.plan.max_new_tokens)
            self._finish(req)

    def _decode_failure(self, req: Request, what: str, reason: str) -> None:
        message = (f"Decode {what} failed for request rank=0 decode_req.req.rid={req.rid!r} "
                   f"decode_req.req.bootstrap_room={req.room} with exception "
                   f"KVTransferError(bootstrap_room={req.room}): {reason}")
        logger.error(message)
        counter = "sglang:num_bootstrap_failed_reqs_total" if what == "handshake" else \
            "sglang:num_transfer_failed_reqs_total"
        self.metrics.inc(counter)
        self._fail(req, message)

    async def _decode_abort_notify(self, req: Request) -> None:
        if req.target is not None and not req.abort_notified:
            req.abort_notified = True
            assert self.decode_link is not None
            await self.decode_link.send_abort(req.target, req.room)

    # aborts ----------------------------------------------------------------------------------
    async def _on_abort(self, req: Request) -> None:
        stage = req.stage
        if self.mode == "decode" and stage in ("prealloc", "transfer"):
            logger.debug("Abort %s queue request. decode_req.req.rid=%r", stage, req.rid)
            await self._decode_abort_notify(req)
            self._decode_failure(req, "handshake" if stage == "prealloc" else "transfer", ABORT_REASON)
        elif self.mode == "prefill" and stage in ("bootstrap", "inflight"):
            assert self.kv is not None
            logger.debug("Abort %s queue request. req.rid=%r", stage, req.rid)
            self.kv.abort_room(req.room, ABORT_REASON)
            self._prefill_failure(req, "bootstrap" if stage == "bootstrap" else "transfer",
                                  self.kv.failure_reason(req.room), logging.WARNING)
            self.kv.release_room(req.room)
        else:
            if self.mode == "prefill" and self.kv is not None:
                self.kv.release_room(req.room)
            logger.debug("Abort %s request. req.rid=%r", "running" if stage == "running" else "queued", req.rid)
            req.out.put_nowait(Event("error", status=200, message=ABORT_REASON, meta={"abort": True}))
