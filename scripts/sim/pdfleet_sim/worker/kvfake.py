"""A light KV seam for tests without SGLang's runtime (``PDFLEET_SIM_KV_BACKEND=fake``).

It speaks the same frame layout as SGLang's NIXL backend on a real loopback ZMQ socket, so the
HTTP/PD machinery is exercised end to end; only the reader thread is ours. With
``abort_kills_thread`` it behaves like the affected SGLang versions (the reader dies on a leading
frame that is not the guard), otherwise like the fixed ones (ABORT fails the room, anything else
unknown is logged and skipped). The real thing lives in :mod:`pdfleet_sim.worker.kvreal`.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid

from pdfleet_sim.worker.kv import GUARD, DecodePeer, KVPoll, ThreadState, TPPrefillKV

logger = logging.getLogger("pdfleet_sim.worker.kvfake")

FAKE_VERSION = "0.0.0+fake"
# The version the light stand-in reports instead (tests of what reads it: two cohorts of "versions" on one machine).
FAKE_VERSION_ENV = "PDFLEET_SIM_FAKE_VERSION"


def fake_version() -> str:
    return os.environ.get(FAKE_VERSION_ENV) or FAKE_VERSION


def fake_prefill_kv(bind_ip: str, tp_size: int = 1, abort_kills_thread: bool = False) -> TPPrefillKV:
    """One fake rank (socket + reader thread) per TP rank, like the real prefill's managers."""
    return TPPrefillKV([FakePrefillKV(bind_ip, abort_kills_thread, tp_rank=r) for r in range(max(1, tp_size))])


class FakePrefillKV:
    """One TP rank's socket plus one reader thread, in the spirit of NixlKVManager's."""

    def __init__(self, bind_ip: str, abort_kills_thread: bool = False, tp_rank: int = 0) -> None:
        import zmq  # imported here: pdfleet_sim.worker must import without pyzmq

        self.tp_rank = tp_rank
        self._zmq = zmq
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._port = self._sock.bind_to_random_port(f"tcp://{bind_ip}")
        self._ip = bind_ip
        self._abort_kills = abort_kills_thread
        self._lock = threading.Lock()
        self._status: dict[int, int] = {}
        self._failures: dict[int, str] = {}
        self._infos: dict[int, dict[str, DecodePeer]] = {}
        self._peers: dict[str, DecodePeer] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._reader, name="bootstrap_thread", daemon=True)
        self._thread.start()

    @property
    def rank_ip(self) -> str:
        return self._ip

    @property
    def rank_port(self) -> int:
        return self._port

    @property
    def sglang_version(self) -> str:
        return fake_version()

    def _set(self, room: int, status: int) -> None:
        # SGLang's rules: Failed is sticky, other states only move forward, and a cleared room
        # is not resurrected by a late Failed.
        with self._lock:
            if room not in self._status:
                if status != KVPoll.Failed:
                    self._status[room] = status
            elif status == KVPoll.Failed:
                self._status[room] = KVPoll.Failed
            else:
                self._status[room] = max(self._status[room], status)

    def _reader(self) -> None:
        poller = self._zmq.Poller()
        poller.register(self._sock, self._zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(100):
                continue
            frames = self._sock.recv_multipart()
            head = frames[0]
            if head == b"ABORT" and not self._abort_kills:
                room = int(frames[1].decode("ascii"))
                with self._lock:
                    # Deliberately not SGLang's wording: the logs check takes abort evidence only from what
                    # the real handler prints, never from this stand-in (issue 11).
                    self._failures[room] = "fake KV stand-in: room failed on the decode's ABORT"
                    self._infos.pop(room, None)
                self._set(room, KVPoll.Failed)
                continue
            if head != GUARD:
                if self._abort_kills:
                    # The affected versions: an assertion escapes the loop and the thread is gone.
                    raise AssertionError(f"First message should be {GUARD!r}. Foreign traffic?")
                logger.warning("fake bootstrap_thread: unexpected leading frame %r, skipped", head[:32])
                continue
            body = frames[1:]
            room_s = body[0].decode("ascii")
            peer = DecodePeer(ip=body[1].decode("ascii"), port=int(body[2].decode("ascii")),
                              agent_name=body[3].decode("ascii"))
            if room_s == "None":
                self._peers[peer.agent_name] = peer
                continue
            room = int(room_s)
            required = int(body[6].decode("ascii"))
            with self._lock:
                infos = self._infos.setdefault(room, {})
                infos[peer.agent_name] = peer
                complete = len(infos) == required
            if complete:
                self._set(room, KVPoll.WaitingForInput)

    def open_room(self, room: int) -> None:
        self._set(room, KVPoll.Bootstrapping)

    def poll(self, room: int) -> int:
        with self._lock:
            return self._status.get(room, KVPoll.Bootstrapping)

    def failure_reason(self, room: int) -> str | None:
        with self._lock:
            return self._failures.pop(room, None)

    def decode_peers(self, room: int) -> list[DecodePeer]:
        with self._lock:
            return list(self._infos.get(room, {}).values())

    @property
    def supports_bootstrap_timeout(self) -> bool:
        return True

    def start_transfer(self, room: int) -> None:
        # Our transfer worker is instantaneous: skip a failed room, else finish and drop its infos.
        if self.poll(room) == KVPoll.Failed:
            return
        self._set(room, KVPoll.Success)
        with self._lock:
            self._infos.pop(room, None)

    def abort_room(self, room: int, reason: str) -> None:
        with self._lock:
            self._failures[room] = reason
        self._set(room, KVPoll.Failed)

    def release_room(self, room: int) -> None:
        with self._lock:
            self._status.pop(room, None)
            self._infos.pop(room, None)
            self._failures.pop(room, None)

    def threads(self) -> list[ThreadState]:
        return [ThreadState("bootstrap_thread", self._thread.is_alive())]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)
        self._sock.close(0)
        self._ctx.term()


class FakeDecodeFrames:
    """Frames in the layout of SGLang's NIXL decode side (0.5.15 ABORT: four frames)."""

    def __init__(self) -> None:
        self._agent = f"sim-decode-{uuid.uuid4().hex[:8]}"

    def agent_name(self, rank: int = 0) -> str:
        return f"{self._agent}-tp{rank}"

    def register(self, local_ip: str, local_port: int, rank: int = 0, tp_size: int = 1) -> list[bytes]:
        return [GUARD, b"None", local_ip.encode(), str(local_port).encode(), self.agent_name(rank).encode(),
                b"", b"", b"", b"", str(rank).encode(), str(tp_size).encode(), str(rank).encode(), b"1"]

    def transfer_info(self, room: int, local_ip: str, local_port: int, num_pages: int, rank: int = 0,
                      required_dst_info_num: int = 1) -> list[bytes]:
        indices = b"".join(i.to_bytes(4, "little") for i in range(num_pages))
        return [GUARD, str(room).encode(), local_ip.encode(), str(local_port).encode(),
                self.agent_name(rank).encode(), indices, b"0", str(required_dst_info_num).encode(), b"", b"0"]

    def abort(self, room: int, local_ip: str, local_port: int) -> list[bytes]:
        return [b"ABORT", str(room).encode(), local_ip.encode(), str(local_port).encode()]
