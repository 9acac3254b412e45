"""The HTTP API of a simulated worker, in SGLang's shapes (aiohttp).

Routes: ``/health``, ``/health_generate``, ``/ready``, ``/get_server_info`` and ``/server_info``,
``/get_model_info`` and ``/model_info``, ``/get_load``, ``/v1/loads``, ``/v1/models``, ``/generate``,
``/v1/chat/completions``, ``/v1/completions``, ``/abort_request``, ``/flush_cache``, ``/metrics``
(with ``--enable-metrics``), and the simulator's own ``/pdfleet/sim``.

``/health`` never touches the KV path (as in SGLang, where the PD health probe uses a fake
transfer backend): a wedged simulated prefill still answers 200.

A client that goes away, as in SGLang (see :mod:`pdfleet_sim.worker.waitloop` for the real code):

* before its response started (non-streaming, or an OpenAI stream before its first chunk: those send no
  header until then, so a router in front still waits for them and drops its upstream connection when its own
  client leaves): the tokenizer's wait loop notices at its next ``SGLANG_REQUEST_STATE_WAIT_TIMEOUT`` tick
  (4 s) and aborts at once; a queued request is dropped without being computed;
* after (a started stream; native ``/generate`` streams start at once): the stream stops and the
  ``AbortReq`` follows after ``PDFLEET_SIM_ABORT_DELAY_S`` (SGLang's ``create_abort_task``: 2 s).

Either way one ``[http_server] Client disconnected: ...`` line is logged when the worker notices (real SGLang
logs it in these words for ``/generate`` streams; its other paths only count the abort), and
``sglang:num_aborted_requests_total`` counts the aborts that reached a live request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from pdfleet_sim.worker import engine
from pdfleet_sim.worker.args import SimSettings, WorkerArgs
from pdfleet_sim.worker.kv import PrefillKV
from pdfleet_sim.worker.metrics import Metrics
from pdfleet_sim.worker.scheduler import Event, Request, Scheduler
from pdfleet_sim.worker.waitloop import TYPE_STREAM_STARTED, WaitLoop

logger = logging.getLogger("sglang.srt.entrypoints.http_server")


class SimServer:
    """Routes plus the state they read; built by :mod:`pdfleet_sim.worker.__main__`."""

    def __init__(
        self,
        args: WorkerArgs,
        settings: SimSettings,
        scheduler: Scheduler,
        metrics: Metrics,
        version: str,
        kv: PrefillKV | None = None,
    ) -> None:
        self.args = args
        self.settings = settings
        self.scheduler = scheduler
        self.metrics = metrics
        self.version = version
        self.kv = kv
        self.status = "Starting"
        self.started = time.time()
        self._abort_handles: set[asyncio.TimerHandle] = set()
        self.route_hits: Counter[str] = Counter()
        # (path, method) -> requests in progress, as SGLang's `sglang:http_requests_active` gauge counts them
        # (sglang/srt/utils/common.py, add_prometheus_track_response_middleware: inc before the handler,
        # dec when the response, including a whole stream, is done).
        self.http_active: Counter[tuple[str, str]] = Counter()

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Count hits per path (``/pdfleet/sim`` shows them: which calls a router made) and requests active."""
        key = (request.path, request.method)
        self.route_hits[f"{request.method} {request.path}"] += 1
        self.http_active[key] += 1
        logger.debug("%s %s", request.method, request.path_qs)
        try:
            return await handler(request)
        finally:
            self.http_active[key] -= 1

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._count])
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health)
        r.add_get("/ready", self.ready)
        r.add_get("/get_server_info", self.server_info)
        r.add_get("/server_info", self.server_info)
        r.add_get("/get_model_info", self.model_info)
        r.add_get("/model_info", self.model_info)
        r.add_get("/get_load", self.get_load)
        r.add_get("/v1/loads", self.v1_loads)
        r.add_get("/v1/models", self.models)
        r.add_route("POST", "/generate", self.generate)
        r.add_route("PUT", "/generate", self.generate)
        r.add_post("/v1/chat/completions", self.chat)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/abort_request", self.abort_request)
        r.add_route("*", "/flush_cache", self.flush_cache)
        r.add_get("/pdfleet/sim", self.sim_state)
        if self.args.enable_metrics:
            r.add_get("/metrics", self.metrics_endpoint)
        return app

    # ----- health and info -------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        if self.status != "Up":
            return web.Response(status=503)
        # SGLang's PD health probe goes through a fake bootstrap host and fake transfer backend:
        # it proves the scheduler loop answers, never the KV path.
        await asyncio.sleep(0)
        return web.Response(status=200)

    async def ready(self, _: web.Request) -> web.Response:
        return web.Response(status=200 if self.status == "Up" else 503)

    async def server_info(self, request: web.Request) -> web.Response:
        if request.path == "/get_server_info":
            logger.warning("Endpoint '/get_server_info' is deprecated and will be removed in a future "
                           "version. Please use '/server_info' instead.")
        load = self.scheduler.load()
        info: dict[str, Any] = {
            **self.args.as_server_args(),
            "max_total_num_tokens": self.args.max_total_tokens or 1_000_000,
            "max_req_input_len": self.args.effective_context_length() - 1,
            "internal_states": [{
                "last_gen_throughput": self.scheduler.gauges()["sglang:gen_throughput"],
                "load": load["num_running_reqs"] + load["num_waiting_reqs"],
                "memory_usage": {},
            }],
            "version": self.version,
            "kv_events": None,
            "pdfleet_sim": True,
        }
        return web.json_response(info)

    def _model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.args.model_path,
            "tokenizer_path": self.args.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": self.args.preferred_sampling_params,
            "weight_version": self.args.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": None,
            "architectures": None,
        }

    async def model_info(self, request: web.Request) -> web.Response:
        if request.path == "/get_model_info":
            logger.warning("Endpoint '/get_model_info' is deprecated and will be removed in a future "
                           "version. Please use '/model_info' instead.")
        return web.json_response(self._model_info())

    async def get_load(self, _: web.Request) -> web.Response:
        load = self.scheduler.load()
        return web.json_response([{
            "dp_rank": 0,
            "num_reqs": load["num_running_reqs"] + load["num_waiting_reqs"],
            "num_waiting_reqs": load["num_waiting_reqs"],
            "num_tokens": 0,
            "num_pending_tokens": 0,
            "ts_tic": time.perf_counter(),
        }])

    async def v1_loads(self, _: web.Request) -> web.Response:
        load = self.scheduler.load()
        return web.json_response({
            "timestamp": time.time(),
            "version": self.version,
            "dp_rank_count": 1,
            "loads": [{"dp_rank": 0, **load, "num_total_tokens": 0, "num_used_tokens": 0}],
        })

    async def models(self, _: web.Request) -> web.Response:
        card = {
            "id": self.args.served_model_name,
            "object": "model",
            "created": int(self.started),
            "owned_by": "sglang",
            "root": self.args.model_path,
            "parent": None,
            "max_model_len": self.args.effective_context_length(),
        }
        return web.json_response({"object": "list", "data": [card]})

    async def flush_cache(self, _: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. "
                                 "(When there are running or waiting requests, the operation will not be performed.)\n")

    async def metrics_endpoint(self, _: web.Request) -> web.Response:
        threads = [(t.name, t.alive) for t in self.kv.threads()] if self.kv is not None else []
        body = self.metrics.render(self.scheduler.gauges(), threads, dict(self.http_active))
        return web.Response(text=body, content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type": "text/plain; version=0.0.4"})

    async def sim_state(self, _: web.Request) -> web.Response:
        """Simulator-only introspection: KV threads, queues, settings."""
        return web.json_response({
            "mode": self.args.disaggregation_mode,
            "status": self.status,
            "sglang_version": self.version,
            "kv_backend": self.settings.kv_backend,
            "kv_threads": {t.name: t.alive for t in self.kv.threads()} if self.kv is not None else {},
            "stages": dict(self.scheduler.stage_counts()),
            "forward_passes": self.scheduler.forward_passes,
            "counters": dict(self.metrics.counters),
            "route_hits": dict(self.route_hits),
            # decode: requests per prefill bootstrap address (host:port), to see which pairs served
            "prefill_peers": self.scheduler.decode_link.prefill_hits() if self.scheduler.decode_link else {},
        })

    async def abort_request(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        rid = str(body.get("rid", ""))
        if body.get("abort_all"):
            self.scheduler.abort_all()
        elif rid:
            self.scheduler.abort(rid)
        return web.Response(status=200)

    # ----- generation ------------------------------------------------------------------------
    def _client_gone(self, req: Request, wait: WaitLoop, started: bool, exc: BaseException) -> None:
        """The HTTP peer went away (aiohttp cancelled the handler, or a write failed)."""
        if not started:
            # Nothing was sent yet: the wait loop notices at its next tick, as SGLang's tokenizer does.
            wait.peer_gone()
            return
        # A started stream: Starlette stops it now; create_abort_task sends the AbortReq after its sleep.
        wait.stop()
        self._wait_noticed(req, f"{TYPE_STREAM_STARTED}, {type(exc).__name__}")

    def _wait_noticed(self, req: Request, kind: str) -> None:
        """The worker noticed that the client left: abort now (the wait loop's tokenizer_manager.abort_request),
        or after ``abort_delay_s`` once the stream had started (create_abort_task); logged in SGLang's words."""
        later = kind.startswith(TYPE_STREAM_STARTED)
        logger.info("[http_server] Client disconnected: Request is disconnected from the client side (%s). "
                    "Abort request obj.rid=%r%s", kind, req.rid,
                    f" in {self.settings.abort_delay_s:g}s" if later else "")
        if not later:
            self.scheduler.abort(req.rid)
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._abort_handles.discard(handle)
            self.scheduler.abort(req.rid)

        handle = loop.call_later(self.settings.abort_delay_s, fire)
        self._abort_handles.add(handle)

    def _submit(self, plan: engine.SamplingPlan) -> Request:
        if self.status != "Up":
            raise _HTTPError(503, "The server is not ready yet.")
        return self.scheduler.submit(plan)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            plan = engine.plan_generate(await _json_body(request), self.settings)
            req = self._submit(plan)
        except (engine.RequestError, _HTTPError) as e:
            return _error(e)
        # SGLang's /generate returns its StreamingResponse at once: the header goes out before any token.
        return await self._respond(request, req, _GenerateFormat(req), header_first=True)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            plan = engine.plan_chat(body, self.settings)
            req = self._submit(plan)
        except (engine.RequestError, _HTTPError) as e:
            return _error(e)
        model = str(body.get("model") or self.args.served_model_name)
        return await self._respond(request, req, _ChatFormat(req, model, "chat"), header_first=False)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise engine.RequestError("prompt must be one string (batches are not simulated)")
            plan = engine.plan_generate({**body, "text": prompt, "sampling_params": {
                "max_new_tokens": body.get("max_tokens")}}, self.settings)
            plan.include_usage = bool((body.get("stream_options") or {}).get("include_usage", False))
            req = self._submit(plan)
        except (engine.RequestError, _HTTPError) as e:
            return _error(e)
        model = str(body.get("model") or self.args.served_model_name)
        return await self._respond(request, req, _ChatFormat(req, model, "text"), header_first=False)

    async def _respond(self, request: web.Request, req: Request, fmt: _Format,
                       header_first: bool) -> web.StreamResponse:
        """``header_first``: a stream's header goes out before its first event (else with it, as SGLang's
        OpenAI handlers, which kick-start the generator first)."""
        wait = WaitLoop(req, req.plan.stream, self.settings.request_state_wait_timeout_s,
                        self.settings.force_stream_interval, self._wait_noticed)
        resp: web.StreamResponse | None = None
        try:
            if not req.plan.stream:
                return await self._respond_whole(wait, fmt)
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            return await self._respond_stream(request, resp, wait, fmt, header_first)
        except asyncio.CancelledError as e:
            self._client_gone(req, wait, resp is not None and resp.prepared, e)
            raise
        except ConnectionResetError as e:
            # Writing to a client that went away: SGLang's server logs the disconnect and nothing else; a
            # re-raise here would make aiohttp log a traceback no real worker prints.
            self._client_gone(req, wait, resp is not None and resp.prepared, e)
            return web.Response(status=499)

    async def _respond_whole(self, wait: WaitLoop, fmt: _Format) -> web.Response:
        async for ev in _events(wait):
            if ev.kind == "token":
                fmt.add(ev)
            elif ev.kind == "error":
                return _error_json(ev.status if ev.status != 200 else 500, ev.message)
            else:
                return web.json_response(fmt.whole(ev.meta))
        return _error_json(500, "request ended without a result")

    async def _respond_stream(self, request: web.Request, resp: web.StreamResponse, wait: WaitLoop, fmt: _Format,
                              header_first: bool) -> web.StreamResponse:
        if header_first:
            await resp.prepare(request)
        async for ev in _events(wait):
            if ev.kind == "token":
                chunks = fmt.stream_token(ev)
            elif ev.kind == "error":
                chunks = [{"error": {"message": ev.message, "type": "invalid_request_error"
                                     if ev.status == 400 else "internal_server_error", "code": ev.status}}]
            else:
                chunks = fmt.stream_finish(ev.meta)
            if not resp.prepared:
                await resp.prepare(request)
            for chunk in chunks:
                await resp.write(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
            if ev.kind != "token":
                break
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise engine.RequestError("The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise engine.RequestError("The request body must be a JSON object.")
    return body


def _error_json(status: int, message: str) -> web.Response:
    return web.json_response(
        {"object": "error", "message": message, "type": "BadRequest" if status == 400 else "InternalServerError",
         "param": None, "code": status},
        status=status,
    )


def _error(e: Exception) -> web.Response:
    return _error_json(getattr(e, "status", 400), str(e))


async def _events(wait: WaitLoop) -> AsyncIterator[Event]:
    while True:
        ev = await wait.outbox.get()
        yield ev
        if ev.kind != "token":
            return


class _Format:
    """How one request's events become response bodies."""

    def __init__(self, req: Request) -> None:
        self.req = req
        self.ids: list[int] = []
        self.text = ""

    def add(self, ev: Event) -> None:
        self.ids.append(ev.token_id)
        self.text += ev.piece

    def whole(self, meta: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def stream_token(self, ev: Event) -> list[dict[str, Any]]:
        raise NotImplementedError

    def stream_finish(self, meta: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError


class _GenerateFormat(_Format):
    """SGLang's native ``/generate``: cumulative ``text`` and ``output_ids`` plus ``meta_info``."""

    def _meta(self, finish: dict[str, Any] | None) -> dict[str, Any]:
        return {"id": self.req.rid, "finish_reason": finish, "prompt_tokens": self.req.plan.prompt_tokens,
                "completion_tokens": len(self.ids), "cached_tokens": 0}

    def whole(self, meta: dict[str, Any]) -> dict[str, Any]:
        return {"text": self.text, "output_ids": list(self.ids), "meta_info": {**self._meta(None), **meta}}

    def stream_token(self, ev: Event) -> list[dict[str, Any]]:
        self.add(ev)
        return [{"text": self.text, "output_ids": list(self.ids), "meta_info": self._meta(None)}]

    def stream_finish(self, meta: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"text": self.text, "output_ids": list(self.ids), "meta_info": {**self._meta(None), **meta}}]


class _ChatFormat(_Format):
    """OpenAI chat (``kind="chat"``) or text (``kind="text"``) completions."""

    def __init__(self, req: Request, model: str, kind: str) -> None:
        super().__init__(req)
        self.model = model
        self.kind = kind
        self.id = engine.new_chat_id() if kind == "chat" else f"cmpl-{req.rid}"
        self.created = engine.now_s()
        self.started = False

    def _usage(self) -> dict[str, Any]:
        prompt = self.req.plan.prompt_tokens
        return {"prompt_tokens": prompt, "total_tokens": prompt + len(self.ids),
                "completion_tokens": len(self.ids), "prompt_tokens_details": None, "reasoning_tokens": 0}

    def _finish_reason(self, meta: dict[str, Any]) -> str:
        reason = meta.get("finish_reason") or {}
        return str(reason.get("type", "stop")) if isinstance(reason, dict) else str(reason)

    def _chunk(self, choice: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": [choice] if choice else [], "usage": usage}

    def whole(self, meta: dict[str, Any]) -> dict[str, Any]:
        reason = self._finish_reason(meta)
        if self.kind == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": self.text, "reasoning_content": None,
                            "tool_calls": None},
                "logprobs": None, "finish_reason": reason, "matched_stop": None,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": self.text, "logprobs": None, "finish_reason": reason,
                      "matched_stop": None}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": [choice], "usage": self._usage(), "metadata": {"weight_version": "default"}}

    def stream_token(self, ev: Event) -> list[dict[str, Any]]:
        self.add(ev)
        out: list[dict[str, Any]] = []
        if self.kind == "chat":
            if not self.started:
                self.started = True
                out.append(self._chunk({"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "logprobs": None, "finish_reason": None, "matched_stop": None}))
            out.append(self._chunk({"index": 0, "delta": {"role": None, "content": ev.piece,
                                                          "reasoning_content": None, "tool_calls": None},
                                    "logprobs": None, "finish_reason": None, "matched_stop": None}))
        else:
            out.append(self._chunk({"index": 0, "text": ev.piece, "logprobs": None, "finish_reason": None,
                                    "matched_stop": None}))
        return out

    def stream_finish(self, meta: dict[str, Any]) -> list[dict[str, Any]]:
        reason = self._finish_reason(meta)
        out: list[dict[str, Any]] = []
        if self.kind == "chat":
            if not self.started:
                self.started = True
                out.append(self._chunk({"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "logprobs": None, "finish_reason": None, "matched_stop": None}))
            out.append(self._chunk({"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason,
                                    "matched_stop": None}))
        else:
            out.append(self._chunk({"index": 0, "text": "", "logprobs": None, "finish_reason": reason,
                                    "matched_stop": None}))
        if self.req.plan.include_usage:
            out.append(self._chunk({}, usage=self._usage()))
        return out
