"""The KV transfer seam of the simulated worker.

A prefill worker owns a :class:`PrefillKV`: the object whose reader thread drains the ZMQ PULL
socket that decode workers push to. In production that is SGLang's ``NixlKVManager``; the
simulator uses the real one (:mod:`pdfleet_sim.worker.kvreal`) or, for tests without the heavy
runtime, a light stand-in (:mod:`pdfleet_sim.worker.kvfake`). A decode worker owns a
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
    """Prefill side of the KV path: the KV manager(s) that own the PULL socket(s) decode ranks push to.

    One object per TP rank (:class:`RankKV`) or, for the whole worker, a :class:`TPPrefillKV` over all of
    them (the scheduler's view: one status per room, all-reduced over the ranks)."""

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


class RankKV(PrefillKV, Protocol):
    """One TP rank's KV manager: its own PULL socket (``rank_ip:rank_port``) and bootstrap thread."""

    tp_rank: int

    @property
    def rank_ip(self) -> str: ...

    @property
    def rank_port(self) -> int: ...


class TPPrefillKV:
    """A prefill worker's TP ranks seen as one KV seam, the way SGLang's prefill scheduler sees them.

    Real SGLang runs one scheduler process per TP rank, each with its own ``NixlKVManager``: its own
    PULL socket on its own port (``get_zmq_socket_on_host``, common/conn.py:148 in 0.5.15.post1, :400 in
    0.5.23), registered in the bootstrap table under its ``attn_tp_rank`` (``register_to_bootstrap``,
    common/conn.py:390 / :1562), read by its own ``bootstrap_thread`` (nixl/conn.py:2320 / :3356). The
    scheduler all-reduces the ranks' polls with MIN (``poll_and_all_reduce``, utils.py:129 / :305), so a
    room moves on only when every rank has its decode's transfer info, and Failed on any rank fails it.
    """

    def __init__(self, ranks: list[RankKV]) -> None:
        if not ranks:
            raise ValueError("a prefill needs at least one TP rank")
        self.ranks = ranks

    @property
    def sglang_version(self) -> str:
        return self.ranks[0].sglang_version

    @property
    def supports_bootstrap_timeout(self) -> bool:
        return self.ranks[0].supports_bootstrap_timeout

    def open_room(self, room: int) -> None:
        for rank in self.ranks:
            rank.open_room(room)

    def poll(self, room: int) -> int:
        return min(rank.poll(room) for rank in self.ranks)

    def failure_reason(self, room: int) -> str | None:
        reasons = [rank.failure_reason(room) for rank in self.ranks]  # pop on every rank
        return next((r for r in reasons if r is not None), None)

    def decode_peers(self, room: int) -> list[DecodePeer]:
        """Where the room's KV goes: one entry per decode endpoint, whichever ranks reported it."""
        seen: dict[tuple[str, int], DecodePeer] = {}
        for rank in self.ranks:
            for peer in rank.decode_peers(room):
                seen.setdefault((peer.ip, peer.port), peer)
        return list(seen.values())

    def start_transfer(self, room: int) -> None:
        for rank in self.ranks:
            rank.start_transfer(room)

    def abort_room(self, room: int, reason: str) -> None:
        for rank in self.ranks:
            rank.abort_room(room, reason)

    def release_room(self, room: int) -> None:
        for rank in self.ranks:
            rank.release_room(room)

    def threads(self) -> list[ThreadState]:
        """Every rank's threads; with more than one rank each name ends in ``@tp<rank>``."""
        if len(self.ranks) == 1:
            return self.ranks[0].threads()
        return [ThreadState(f"{t.name}@tp{i}", t.alive) for i, rank in enumerate(self.ranks) for t in rank.threads()]

    def close(self) -> None:
        for rank in self.ranks:
            rank.close()


class DecodeFrames(Protocol):
    """Decode side: the frames a decode rank pushes to a prefill rank socket.

    ``rank`` is the decode's TP (engine) rank: each rank is its own NIXL agent in SGLang, so it has its
    own agent name and registers its KV args with every prefill rank it reads from."""

    def agent_name(self, rank: int = 0) -> str: ...

    def register(self, local_ip: str, local_port: int, rank: int = 0, tp_size: int = 1) -> list[bytes]:
        """Frames that register decode rank ``rank``'s KV args (sent once per prefill rank)."""

    def transfer_info(self, room: int, local_ip: str, local_port: int, num_pages: int, rank: int = 0,
                      required_dst_info_num: int = 1) -> list[bytes]:
        """Frames that give the prefill rank the destination of ``room``'s KV (from decode rank ``rank``)."""

    def abort(self, room: int, local_ip: str, local_port: int) -> list[bytes]:
        """Frames the pinned SGLang version's decode sends when a pending request is aborted."""
