"""The KV transfer seam of the simulated worker.

A prefill worker owns a :class:`PrefillKV`: the object whose reader thread drains the ZMQ PULL
socket that decode workers push to. In production that is SGLang's ``NixlKVManager``; the
simulator uses the real one (:mod:`pdfleet.simworker.kvreal`) or, for tests without the heavy
runtime, a light stand-in (:mod:`pdfleet.simworker.kvfake`). A decode worker owns a
:class:`DecodeFrames`: the builder of the exact multipart frames a decode rank pushes (register its
KV args, transfer info per room, ``ABORT``) for the pinned SGLang version.

Room states are SGLang's ``KVPoll`` values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class KVPoll:
    """SGLang's KVPoll values (disaggregation/base/conn.py)."""

    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4



GUARD = b"NixlMsgGuard"


@dataclass(frozen=True)
class DecodePeer:
    """Where the decode rank that sent transfer info for a room listens (from its frames)."""

    ip: str
    port: int
    agent_name: str


@dataclass(frozen=True)
class ThreadState:
    name: str
    alive: bool


class PrefillKV(Protocol):
    """Prefill side of the KV path: owns the rank PULL socket and the thread(s) that drain it."""

    @property
    def rank_ip(self) -> str: ...

    @property
    def rank_port(self) -> int: ...

    @property
    def sglang_version(self) -> str: ...

    def open_room(self, room: int) -> None:
        """A prefill request for ``room`` arrived (SGLang: the sender marks it Bootstrapping)."""

    def poll(self, room: int) -> int:
        """The room's KVPoll value; Bootstrapping while the decode's transfer info is missing."""

    def failure_reason(self, room: int) -> str | None:
        """Why the room failed, if a failure was recorded (popped)."""

    def decode_peers(self, room: int) -> list[DecodePeer]:
        """The decode ranks whose transfer info for ``room`` the reader thread registered."""

    @property
    def supports_bootstrap_timeout(self) -> bool:
        """Whether this SGLang's NIXL sender honours SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT."""

    def start_transfer(self, room: int) -> None:
        """Hand the room's last KV chunk to the transfer worker; the room ends Success or Failed."""

    def abort_room(self, room: int, reason: str) -> None:
        """Local abort of a prefill request (SGLang: sender.abort(); the room becomes Failed)."""

    def release_room(self, room: int) -> None:
        """Forget everything about ``room`` (SGLang: sender.clear() after the request ended)."""

    def threads(self) -> list[ThreadState]:
        """Liveness of the manager's threads (the bootstrap reader first)."""

    def close(self) -> None: ...


class DecodeFrames(Protocol):
    """Decode side: the frames a decode rank pushes to a prefill rank socket."""

    @property
    def agent_name(self) -> str: ...

    def register(self, local_ip: str, local_port: int) -> list[bytes]:
        """Frames that register this decode rank's KV args (sent once per prefill rank)."""

    def transfer_info(self, room: int, local_ip: str, local_port: int, num_pages: int) -> list[bytes]:
        """Frames that give the prefill rank the destination of ``room``'s KV."""

    def abort(self, room: int, local_ip: str, local_port: int) -> list[bytes]:
        """Frames the pinned SGLang version's decode sends when a pending request is aborted."""
