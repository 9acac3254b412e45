"""SGLang's own wait loop, measured: when does the real tokenizer manager abort a queued request whose client
left, and does the stand-in (pdfleet_sim.worker.waitloop) abort at the same tick? (issue 14)

The real ``TokenizerManager._wait_one_response`` (and 0.5.23's ``_stream_one_response``) is taken from each
pinned version's installed source, compiled on its own (annotations dropped: importing the module needs
fastapi, torch and a GPU-shaped server) and run against a request that never gets an output, with the client
gone 1 s after arrival. Only the method bodies run; the stubs stand for what they touch on that path
(``rid_to_state[rid].event``, ``request.is_disconnected()``, ``abort_request``).
"""

from __future__ import annotations

import ast
import asyncio
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pdfleet.patch import manifest as patches
from pdfleet.patch import runtime
from pdfleet_sim.worker.scheduler import Event
from pdfleet_sim.worker.waitloop import TYPE_WAITING, WaitLoop

pytestmark = pytest.mark.sglang

GONE_AFTER_S = 1.0
METHODS = ("_wait_one_response", "_stream_one_response")


def _wait_timeout(overlay: Path) -> float:
    """SGLANG_REQUEST_STATE_WAIT_TIMEOUT's default in the version's environ.py."""
    text = (overlay / "sglang" / "srt" / "environ.py").read_text()
    m = re.search(r"SGLANG_REQUEST_STATE_WAIT_TIMEOUT\s*=\s*EnvInt\((\d+)\)", text)
    assert m, "SGLANG_REQUEST_STATE_WAIT_TIMEOUT is not an EnvInt in this version any more"
    return float(m.group(1))


def _real_methods(overlay: Path, timeout_s: float) -> dict[str, Any]:
    """The wait-loop methods of the real TokenizerManager, compiled without their annotations."""
    source = (overlay / "sglang" / "srt" / "managers" / "tokenizer_manager.py").read_text()
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "TokenizerManager")
    funcs = [f for f in cls.body if isinstance(f, ast.AsyncFunctionDef | ast.FunctionDef) and f.name in METHODS]
    assert any(f.name == "_wait_one_response" for f in funcs)
    for f in funcs:
        f.returns = None
        for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs):
            a.annotation = None
    namespace: dict[str, Any] = {"asyncio": asyncio, "_REQUEST_STATE_WAIT_TIMEOUT": timeout_s}
    exec(compile(ast.Module(body=funcs, type_ignores=[]), "tokenizer_manager.py", "exec"), namespace)
    return {name: namespace[name] for name in METHODS if name in namespace}


class _Request:
    """A starlette Request as the wait loop uses it: only ``is_disconnected()``."""

    def __init__(self, gone_at: float) -> None:
        self.gone_at = gone_at

    async def is_disconnected(self) -> bool:
        return time.monotonic() >= self.gone_at


async def _real_abort_time(methods: dict[str, Any]) -> tuple[float, str]:
    """Seconds from arrival to the real loop's abort_request, and the error it raised."""
    rid = "r1"
    aborted: list[float] = []
    manager = type("TokenizerManagerStub", (), methods)()
    manager.rid_to_state = {rid: SimpleNamespace(event=asyncio.Event(), out_list=[], finished=False)}
    manager.abort_request = lambda r: aborted.append(time.monotonic())
    obj = SimpleNamespace(rid=rid, stream=True, background=False)
    t0 = time.monotonic()
    request = _Request(t0 + GONE_AFTER_S)
    with pytest.raises(ValueError, match="disconnected from the client side") as err:
        async for _ in manager._wait_one_response(obj, request):
            pass
    assert len(aborted) == 1
    return aborted[0] - t0, str(err.value)


async def _standin_abort_time(timeout_s: float) -> tuple[float, str]:
    noticed: list[tuple[float, str]] = []
    req = SimpleNamespace(out=asyncio.Queue[Event]())
    t0 = time.monotonic()
    loop = WaitLoop(req, True, timeout_s, 50, lambda r, kind: noticed.append((time.monotonic(), kind)))  # type: ignore[arg-type]
    await asyncio.sleep(GONE_AFTER_S)
    loop.peer_gone()
    await asyncio.wait_for(loop.task, 3 * timeout_s)
    assert len(noticed) == 1
    return noticed[0][0] - t0, noticed[0][1]


@pytest.mark.parametrize("version", patches.supported_versions())
def test_real_wait_loop_and_stand_in_abort_at_the_same_tick(version: str) -> None:
    overlay = runtime.ensure_runtime().overlay(version)
    timeout_s = _wait_timeout(overlay)
    real_s, message = asyncio.run(_real_abort_time(_real_methods(overlay, timeout_s)))
    standin_s, kind = asyncio.run(_standin_abort_time(timeout_s))
    print(f"\n[wait loop] sglang {version}: SGLANG_REQUEST_STATE_WAIT_TIMEOUT={timeout_s:g}s, client gone "
          f"{GONE_AFTER_S:g}s after arrival; real abort after {real_s:.3f}s ({message.split('.')[0]}); "
          f"stand-in after {standin_s:.3f}s ({kind})")
    assert "(type 1)" in message and kind == TYPE_WAITING
    # Both abort at the first tick after the disconnect: not before it, and well before the second one.
    for measured in (real_s, standin_s):
        assert timeout_s - 0.05 <= measured < 2 * timeout_s - 0.5
