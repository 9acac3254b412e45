"""A bounded client load for rollout tests: ~``rate`` chat completions per second through the router, mixed
streaming and non-streaming, each with a deadline, until stopped. Every request ends as ``ok``, ``failed``
(an HTTP error or no connection: with its status and how fast it came; an answer without a finish) or ``cut``
(a stream that began and then ended without ``[DONE]``, with an error chunk, or without a ``stop``/``length``
finish; an answer that finished ``abort``; a request past its deadline).

SGLang (and the sim worker) end a stream whose request failed mid-way, a worker shutting down included, with
``data: {"error": ...}`` and then ``data: [DONE]``, and a request aborted on the server finishes with reason
``abort``: only the content says the user lost the answer, so the content is what is judged."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pdfleet_sim.testing.simclient import StreamResult, chat_body, stream_chat


@dataclass
class Outcome:
    kind: str  # ok | failed | cut
    stream: bool
    started: float  # epoch
    seconds: float
    status: int = 0
    detail: str = ""


FINISHED = ("stop", "length")


def _reason(choice: dict[str, Any]) -> str | None:
    reason = choice.get("finish_reason")
    return str(reason.get("type")) if isinstance(reason, dict) else (str(reason) if reason is not None else None)


def judge_stream(res: StreamResult) -> tuple[str, str]:
    """``ok`` for a stream (read by ``pdfleet_sim.testing.simclient.stream_chat``, which stops at an error chunk)
    that finished ``stop``/``length``; else ``cut`` (``failed`` when nothing came before an error), with the
    evidence."""
    if res.error is not None:
        timed_out = "timed out" in res.error or "Timeout" in res.error
        if res.text or timed_out:  # it began, or it ran past its deadline
            return "cut", f"after {len(res.text)} characters: {res.error}"
        return "failed", f"HTTP {res.status}: {res.error}"
    reason = res.finish_reason
    reason = str(reason.get("type")) if isinstance(reason, dict) else reason
    if reason not in FINISHED:
        return "cut", f"finish reason {reason} after {len(res.text)} characters"
    return "ok", ""


def judge_whole(data: str) -> tuple[str, str]:
    """``ok`` for a completion with usage that finished ``stop``/``length``; ``cut`` when it finished otherwise
    (``abort``); ``failed`` when it is no completion."""
    try:
        doc = json.loads(data)
    except json.JSONDecodeError:
        return "failed", f"not JSON: {data[:200]}"
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not choices or "completion_tokens" not in (doc.get("usage") or {}):
        return "failed", data[:200]
    reason = _reason(choices[0])
    if reason not in FINISHED:
        return "cut", f"finish reason {reason}: {data[:200]}"
    return "ok", ""


@dataclass
class Load:
    url: str  # the router's base URL
    model: str
    rate: float = 4.0
    deadline_s: float = 60.0
    max_tokens: int = 24
    # the router's API key; by default the one the scratch cluster of ``url`` gives its router (simcluster)
    api_key: str | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.api_key is None:
            from simcluster import ROUTER_KEYS

            self.api_key = ROUTER_KEYS.get(self.url)

    def _one(self, i: int) -> None:
        stream = i % 2 == 0
        prompt = f"load request {i}: what is PCIe?"
        url = self.url + "/v1/chat/completions"
        t0, epoch = time.monotonic(), time.time()
        out = Outcome("ok", stream, epoch, 0.0)
        if stream:
            res = stream_chat(url, chat_body(self.model, prompt, self.max_tokens, True), self.deadline_s,
                              api_key=self.api_key)
            out.status = res.status
            out.kind, out.detail = judge_stream(res)
        else:
            req = urllib.request.Request(url, data=json.dumps(chat_body(self.model, prompt, self.max_tokens,
                                                                        False)).encode(),
                                         headers={"Content-Type": "application/json",
                                                  **({"Authorization": f"Bearer {self.api_key}"}
                                                     if self.api_key else {})})
            try:
                with urllib.request.urlopen(req, timeout=self.deadline_s) as resp:
                    data = resp.read().decode(errors="replace")
                    out.status = resp.status
                out.kind, out.detail = judge_whole(data)
            except urllib.error.HTTPError as e:
                out.kind, out.status, out.detail = "failed", e.code, e.read().decode(errors="replace")[:200]
            except TimeoutError as e:
                out.kind, out.detail = "cut", f"deadline: {e}"
            except (urllib.error.URLError, OSError) as e:
                out.kind, out.detail = ("cut" if "timed out" in str(e) else "failed"), str(e)
        out.seconds = time.monotonic() - t0
        with self._lock:
            self.outcomes.append(out)

    def _run(self) -> None:
        i = 0
        t0 = time.monotonic()
        while not self._stop.is_set():
            t = threading.Thread(target=self._one, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)
            i += 1
            self._stop.wait(max(0.0, t0 + i / self.rate - time.monotonic()))

    def __enter__(self) -> Load:
        self._runner = threading.Thread(target=self._run, daemon=True)
        self._runner.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._runner.join()
        for t in self._threads:
            t.join(self.deadline_s + 5)

    def dump(self, path: Path) -> None:
        """Every outcome (kind, start epoch, seconds, status, detail) as JSON, to line up with a report's timeline."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            path.write_text(json.dumps([asdict(o) for o in self.outcomes], indent=0))

    def summary(self) -> dict[str, Any]:
        kinds = {k: sum(o.kind == k for o in self.outcomes) for k in ("ok", "failed", "cut")}
        failed = [o for o in self.outcomes if o.kind == "failed"]
        return {"sent": len(self.outcomes), **kinds,
                "failed_max_s": round(max((o.seconds for o in failed), default=0.0), 3),
                "failed_statuses": sorted({o.status for o in failed}),
                "failed_window": [round(min(o.started for o in failed), 3),
                                  round(max(o.started + o.seconds for o in failed), 3)] if failed else None,
                "examples": [o.detail for o in self.outcomes if o.kind != "ok"][:3]}
