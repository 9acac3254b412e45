"""How SGLang's tokenizer manager notices that the client of one request went away.

What the real code does (read in both pinned versions; ``srt/`` is ``sglang/srt/``):

* ``TokenizerManager._wait_one_response`` (``srt/managers/tokenizer_manager.py:1446-1556`` in 0.5.15.post1;
  ``_stream_one_response``, ``:1946-2072`` in 0.5.23) waits for the request's next output with
  ``asyncio.wait_for(state.event.wait(), timeout=_REQUEST_STATE_WAIT_TIMEOUT)``, 4 s by default
  (``SGLANG_REQUEST_STATE_WAIT_TIMEOUT``). Each time the wait times out it asks the ASGI server
  ``await request.is_disconnected()``; if the peer is gone it calls ``abort_request(rid)`` (an ``AbortReq`` to the
  scheduler, and ``sglang:num_aborted_requests_total`` + 1) and raises ``ValueError("Request is disconnected from
  the client side (type 1). ...")``. A non-streaming request also checks after every partial output it receives
  ("type 3"); those arrive every ``SGLANG_FORCE_STREAM_INTERVAL`` (50) tokens
  (``scheduler_components/output_streamer.py:346-349`` in 0.5.15.post1, ``:476`` in 0.5.23).
* So a queued request whose client left is noticed at the first 4 s tick of its wait after the disconnect
  (0-4 s later), and the scheduler pops it from the waiting queue without computing it
  (``Scheduler.abort_request``, "Abort method 1", ``srt/managers/scheduler.py:3878-3923`` in 0.5.15.post1,
  ``:5675-5722`` in 0.5.23; logged at debug as ``Abort queued request.``).
* The check only sees a disconnect once the response has not started: the OpenAI streaming handlers kick-start
  the generator before returning the ``StreamingResponse`` (``openai/serving_chat.py:1001-1020`` in
  0.5.15.post1, ``:2420-2439`` in 0.5.23; ``serving_completions.py:193-213`` / ``:203-223``), so no header goes
  out before the first chunk. Once a stream has started, Starlette's ``StreamingResponse`` (ASGI spec 2.3, as
  uvicorn reports) cancels it as soon as the peer goes away, and the response's background task
  ``create_abort_task`` sends the ``AbortReq`` 2 s later (``tokenizer_manager.py:1808-1820`` /
  ``:2427-2440``); that part is :meth:`pdfleet_sim.worker.server.SimServer._client_gone`.

:class:`WaitLoop` is our own emulation of the first two points: it relays a request's events to the HTTP
handler and, once told that the peer is gone (:meth:`WaitLoop.peer_gone`, what uvicorn's ``connection_lost``
is to ``is_disconnected()``), aborts the request at the tick where the real loop would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from pdfleet_sim.worker.scheduler import Event, Request

TYPE_WAITING = "type 1"  # the wait timed out: waiting queue (or a running request with no output)
TYPE_RUNNING = "type 3"  # a non-streaming request's partial output arrived
# A stream whose client left before its first chunk: the chunk starts the response, Starlette finds the peer
# gone and cancels the stream; the AbortReq follows from create_abort_task (the caller's delay).
TYPE_STREAM_STARTED = "stream started"


class WaitLoop:
    """The tokenizer-side wait of one request; :attr:`outbox` gets every event the HTTP handler needs."""

    def __init__(self, req: Request, stream: bool, timeout_s: float, force_stream_interval: int,
                 on_disconnect: Callable[[Request, str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.req = req
        self.stream = stream
        self.timeout_s = timeout_s
        self.force_stream_interval = max(1, force_stream_interval)
        self.on_disconnect = on_disconnect
        self.outbox: asyncio.Queue[Event] = asyncio.Queue()
        self.gone_at: float | None = None  # when the HTTP layer learnt that the peer closed
        self.noticed: str | None = None  # TYPE_* once the loop noticed it (and aborted)
        self._clock = clock
        self.task = asyncio.get_running_loop().create_task(self._run())

    def peer_gone(self) -> None:
        """The client's connection closed (what makes ``request.is_disconnected()`` true)."""
        if self.gone_at is None:
            self.gone_at = self._clock()

    def stop(self) -> None:
        """The response generator was cancelled (a started stream): the loop waits no more."""
        self.task.cancel()

    async def _run(self) -> None:
        deadline = self._clock() + self.timeout_s
        tokens = 0
        getter: asyncio.Future[Event] | None = None
        try:
            while True:
                if getter is None:
                    getter = asyncio.ensure_future(self.req.out.get())
                done, _ = await asyncio.wait({getter}, timeout=max(0.0, deadline - self._clock()))
                if not done:  # asyncio.TimeoutError in the real loop
                    if self.gone_at is not None:
                        self._notice(TYPE_WAITING)
                        return
                    deadline = self._clock() + self.timeout_s
                    continue
                ev = getter.result()
                getter = None
                self.outbox.put_nowait(ev)
                if ev.kind != "token":
                    return
                if self.stream and self.gone_at is not None:
                    self._notice(TYPE_STREAM_STARTED)
                    return
                tokens += 1
                if self.stream or tokens % self.force_stream_interval == 0:
                    # An output the real tokenizer receives: its wait ends, a new one (and a new timeout) begins.
                    deadline = self._clock() + self.timeout_s
                    if not self.stream and self.gone_at is not None:
                        self._notice(TYPE_RUNNING)
                        return
        finally:
            if getter is not None:
                getter.cancel()

    def _notice(self, kind: str) -> None:
        self.noticed = kind
        self.on_disconnect(self.req, kind)
