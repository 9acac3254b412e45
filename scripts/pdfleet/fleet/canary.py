"""A real request through one specific pair, without any router: what the router does for a PD request
(the same body, plus ``bootstrap_host/port/room``, to the prefill and the decode at once; the decode's
answer is the client's), or a plain request to a mono worker. It proves this pair's KV path, which the
workers' ``/health`` never touches."""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pdfleet.fleet.http import HTTPError, call
from pdfleet.fleet.pairs import Pair

PROMPT = "In one sentence, what is PCIe?"


@dataclass
class CanaryResult:
    host: str
    ok: bool
    status: int
    latency_s: float
    problem: str = ""
    completion_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "ok": self.ok, "status": self.status, "latency_s": round(self.latency_s, 3),
                "problem": self.problem, "completion_tokens": self.completion_tokens}


def chat_body(model: str, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": f"{PROMPT} [{uuid.uuid4().hex[:12]}]"}],
            "max_tokens": max_tokens, "stream": False}


def pair_canary(pair: Pair, model: str, deadline_s: float = 30.0, max_tokens: int = 16) -> CanaryResult:
    """One chat completion through ``pair`` with a deadline; ``ok`` when it answers 200 with tokens."""
    body = chat_body(model, max_tokens)
    prefills, decodes = pair.role("prefill"), pair.role("decode")
    t0 = time.monotonic()
    side: dict[str, Any] = {}
    thread = None
    if pair.is_pd:
        if not prefills or not decodes:
            return CanaryResult(pair.host, False, 0, 0.0, "the pair lacks a prefill or a decode")
        prefill, target = prefills[0], decodes[0]
        body |= {"bootstrap_host": prefill.address or urlsplit(prefill.url).hostname,
                 "bootstrap_port": prefill.bootstrap_port, "bootstrap_room": random.getrandbits(63)}

        def to_prefill() -> None:
            try:
                side["prefill"] = call("POST", prefill.url + "/v1/chat/completions", body, deadline_s)
            except HTTPError as e:
                side["prefill"] = (0, str(e))

        thread = threading.Thread(target=to_prefill, daemon=True)
        thread.start()
    else:
        target = pair.members[0]
    try:
        status, answer = call("POST", target.url + "/v1/chat/completions", body, deadline_s)
    except HTTPError as e:
        return CanaryResult(pair.host, False, 0, time.monotonic() - t0, f"{target.name}: {e}")
    latency = time.monotonic() - t0
    if thread is not None:
        thread.join(max(0.0, deadline_s - latency))
    if status != 200 or not isinstance(answer, dict):
        return CanaryResult(pair.host, False, status, latency, f"{target.name}: HTTP {status}: {str(answer)[:200]}")
    tokens = (answer.get("usage") or {}).get("completion_tokens")
    if not isinstance(tokens, int) or tokens < 1:
        return CanaryResult(pair.host, False, status, latency, f"{target.name}: usage.completion_tokens={tokens!r}")
    return CanaryResult(pair.host, True, status, latency, completion_tokens=tokens)


def cross_pairs(pairs: list[Pair]) -> list[Pair]:
    """Every prefill of ``pairs`` with every decode of another pair: the pairings the router makes across
    hosts, which a same-host canary never exercises (a decode holding stale state about a restarted prefill
    hangs only these)."""
    out = []
    for a in pairs:
        for b in pairs:
            if a.host == b.host:
                continue
            for p in a.role("prefill"):
                for d in b.role("decode"):
                    out.append(Pair(f"{a.host}>{b.host}", (p, d)))
    return out
