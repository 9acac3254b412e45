"""Fake tokenization, timing and token generation: the model part of the simulated worker.

Nothing here touches the network; :mod:`pdfleet_sim.worker.server` drives it. Token counts are an
approximation good enough for load shapes (about four characters per token, as for English text
with DeepSeek's tokenizer); the generated text is a fixed, deterministic word cycle.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pdfleet_sim.worker.args import SimSettings

_WORDS = (
    "PCIe", " is", " a", " high", "-speed", " serial", " bus", " that", " connects", " the", " CPU",
    " to", " GPUs", ",", " NICs", " and", " storage", " with", " point", "-to", "-point", " lanes",
    ".",
)
CHARS_PER_TOKEN = 4


class RequestError(ValueError):
    """The request body is not one the worker can serve (HTTP 400)."""


def count_text_tokens(text: str) -> int:
    """Approximate token count of a text: one token per four UTF-8 bytes, at least one."""
    return max(1, math.ceil(len(text.encode("utf-8")) / CHARS_PER_TOKEN))


def count_chat_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Approximate prompt tokens of a chat request, with a few tokens of template per message."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    total = 0
    for message in messages:
        if not isinstance(message, Mapping):
            raise RequestError("each message must be an object with 'role' and 'content'")
        content = message.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
        total += 4 + count_text_tokens(str(content))
    return total


def token_piece(i: int) -> str:
    return _WORDS[i % len(_WORDS)]


def token_id(i: int) -> int:
    return 1000 + (i % len(_WORDS))


@dataclass
class SamplingPlan:
    """What one request asks for, normalised from the native or the OpenAI body."""

    prompt_tokens: int
    max_new_tokens: int
    stream: bool
    rid: str
    ignore_eos: bool = False
    include_usage: bool = False
    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def has_bootstrap(self) -> bool:
        return self.bootstrap_host is not None and self.bootstrap_room is not None


def _bootstrap_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    host = body.get("bootstrap_host")
    room = body.get("bootstrap_room")
    port = body.get("bootstrap_port")
    # A batch (list) of rooms is not something our router sends for single prompts.
    if isinstance(host, list) or isinstance(room, list):
        raise RequestError("batched bootstrap fields are not supported by the simulator")
    try:
        return {
            "bootstrap_host": str(host) if host is not None else None,
            "bootstrap_port": int(port) if port is not None else None,
            "bootstrap_room": int(room) if room is not None else None,
        }
    except (TypeError, ValueError):
        raise RequestError("bootstrap_port and bootstrap_room must be integers") from None


def _positive_int(value: Any, name: str) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise RequestError(f"{name} must be an integer") from None
    if out < 0:
        raise RequestError(f"{name} must be >= 0")
    return out


def plan_generate(body: Mapping[str, Any], settings: SimSettings) -> SamplingPlan:
    """Normalise a native ``/generate`` body."""
    if "input_ids" in body and body["input_ids"] is not None:
        ids = body["input_ids"]
        if not isinstance(ids, list) or (ids and isinstance(ids[0], list)):
            raise RequestError("input_ids must be one flat list of token ids (batches are not simulated)")
        prompt = max(1, len(ids))
    elif "text" in body and body["text"] is not None:
        if not isinstance(body["text"], str):
            raise RequestError("text must be one string (batches are not simulated)")
        prompt = count_text_tokens(body["text"])
    else:
        raise RequestError("Either text or input_ids should be provided.")
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, Mapping):
        raise RequestError("sampling_params must be an object")
    max_new = sp.get("max_new_tokens")
    max_new = settings.max_tokens_default if max_new is None else _positive_int(max_new, "max_new_tokens")
    rid = body.get("rid") or uuid.uuid4().hex
    return SamplingPlan(
        prompt_tokens=prompt,
        max_new_tokens=max_new,
        stream=bool(body.get("stream", False)),
        rid=str(rid),
        ignore_eos=bool(sp.get("ignore_eos", False)),
        **_bootstrap_fields(body),
    )


def plan_chat(body: Mapping[str, Any], settings: SimSettings) -> SamplingPlan:
    """Normalise an OpenAI ``/v1/chat/completions`` body."""
    prompt = count_chat_tokens(body.get("messages"))  # type: ignore[arg-type]
    max_new = body.get("max_completion_tokens", body.get("max_tokens"))
    max_new = settings.max_tokens_default if max_new is None else _positive_int(max_new, "max_tokens")
    stream_options = body.get("stream_options") or {}
    rid = body.get("rid") or uuid.uuid4().hex
    return SamplingPlan(
        prompt_tokens=prompt,
        max_new_tokens=max_new,
        stream=bool(body.get("stream", False)),
        rid=str(rid),
        ignore_eos=bool(body.get("ignore_eos", False)),
        include_usage=bool(stream_options.get("include_usage", False))
        if isinstance(stream_options, Mapping)
        else False,
        **_bootstrap_fields(body),
    )


def prefill_seconds(prompt_tokens: int, settings: SimSettings) -> float:
    return (settings.prefill_overhead_ms + prompt_tokens * settings.prefill_ms_per_token) / 1000.0


def token_interval(settings: SimSettings) -> float:
    return 1.0 / settings.decode_tokens_per_s


def output_tokens(max_new_tokens: int) -> Iterator[tuple[int, str]]:
    """The (token id, text piece) sequence of a completion of ``max_new_tokens`` tokens."""
    for i in range(max_new_tokens):
        yield token_id(i), token_piece(i)


def finish_reason(max_new_tokens: int) -> dict[str, Any]:
    """SGLang's finish_reason object: the simulator always runs to ``max_new_tokens``."""
    return {"type": "length", "length": max_new_tokens}


def new_chat_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def now_s() -> int:
    return int(time.time())
