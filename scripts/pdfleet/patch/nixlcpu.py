"""Run SGLang's real NIXL prefill-side threads on CPU, and speak the decode side's wire format.

This is a stable API for code that runs inside the heavy runtime interpreter (see ``pdfleet.patch.runtime``):
the wedge reproduction (``pdfleet.patch.wedge``) and the simulated prefill/decode workers. It imports no
torch, SGLang or pyzmq at module import time; the SGLang conn module is passed in (see
:func:`load_conn_module`), so ``import pdfleet.patch.nixlcpu`` is cheap anywhere.

Two halves:

* :class:`CpuPrefill` builds a real ``NixlKVManager`` without its GPU constructor
  (``object.__new__``), binds its ZMQ PULL socket on a loopback ``host:port``, sets the few attributes
  its threads touch, and starts the REAL ``bootstrap_thread`` (the only reader of that socket) and the
  REAL ``transfer_worker`` thread(s). It can then report a room's ``KVPoll`` state and the threads'
  liveness, and stop everything. Two things are stand-ins, because there is no NIXL agent on CPU:
  registering a decode peer only records its parsed ``KVArgsRegisterInfo`` (no NIXL memory
  registration), and only *dummy* transfers (empty KV indices) can be completed by the worker.
* Frame builders (:func:`register_kv_args_frames`, :func:`transfer_info_frames`, :func:`abort_frames`)
  return the exact multipart messages the decode side of a given SGLang version pushes to the prefill
  PULL socket, and :class:`DecodePusher` sends them from a loopback ZMQ PUSH socket.

Typical use (inside the runtime python)::

    conn = load_conn_module(Path(".../patched/conn.py"))
    with CpuPrefill.start(conn) as prefill, DecodePusher(prefill.endpoint) as decode:
        prefill.open_room(7)
        decode.send(transfer_info_frames("0.5.23", 7))
        prefill.wait_for_status(7, "WaitingForInput", timeout=5.0)
"""

from __future__ import annotations

import importlib
import importlib.util
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

CONN_MODULE = "sglang.srt.disaggregation.nixl.conn"
GUARD = b"NixlMsgGuard"
ABORT = b"ABORT"
KVPOLL_NAMES = {0: "Failed", 1: "Bootstrapping", 2: "WaitingForInput", 3: "Transferring", 4: "Success"}
UNKNOWN = "unknown"  # status_name() of a room the manager has no status for

# The decode-side wire layouts pdfleet knows, by SGLang version. Each layout is read from that
# version's NixlKVReceiver / NixlKVManager.build_receiver_*_message and CommonKVReceiver.abort.
FRAME_LAYOUTS: dict[str, str] = {"0.5.15.post1": "v0515", "0.5.23": "v0523"}


class NixlCpuError(Exception):
    """The CPU harness could not do what was asked; the message says what to do."""


def frame_layout(version: str) -> str:
    """The wire layout name of ``version``; raise NixlCpuError listing the known versions."""
    try:
        return FRAME_LAYOUTS[version]
    except KeyError:
        raise NixlCpuError(
            f"no decode frame layout for SGLang {version}; known: {', '.join(FRAME_LAYOUTS)}. "
            f"Read that version's NixlKVReceiver and add a layout to pdfleet.patch.nixlcpu.FRAME_LAYOUTS."
        ) from None


# ---------------------------------------------------------------------------------------------------
# Decode-side frames
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodePeer:
    """The identity a decode rank puts in its frames (its own address, NIXL agent name, ranks)."""

    ip: str = "127.0.0.1"
    port: int = 1  # decode's own rank port: only echoed back in ABORT_ACKs, never dialled here
    agent_name: str = "pdfleet-decode-0"
    gpu_id: int = 0
    tp_size: int = 1
    engine_rank: int = 0
    kv_item_len: int = 16
    num_slots: int = 64
    kv_ptrs: tuple[int, ...] = (0x10000,)
    aux_ptrs: tuple[int, ...] = (0x20000,)


def _ascii(value: object) -> bytes:
    return str(value).encode("ascii")


def _pack_q(values: Sequence[int]) -> bytes:
    return b"".join(struct.pack("Q", v) for v in values)


def register_kv_args_frames(version: str, peer: DecodePeer | None = None) -> list[bytes]:
    """The decode rank's one-time KV-args registration: ``[GUARD, b"None", ip, port, agent, …]``.

    0.5.15.post1: 20 frames (``NixlKVReceiver._register_kv_args``); 0.5.23: 25 frames
    (``NixlKVManager.build_receiver_registration_message``, adds layer ids, DCP size/rank, state lens).
    No staging, no state buffers, VRAM memory kind, agent metadata ``b"pdfleet-cpu"``.
    """
    layout = frame_layout(version)
    p = peer or DecodePeer()
    frames = [
        GUARD,
        b"None",
        _ascii(p.ip),
        _ascii(p.port),
        _ascii(p.agent_name),
        b"pdfleet-cpu",  # agent metadata (opaque to the bootstrap thread)
        _pack_q(p.kv_ptrs),
        _pack_q(p.aux_ptrs),
        b"",  # packed state data ptrs
        _ascii(p.gpu_id),
        _ascii(p.tp_size),
        _ascii(p.engine_rank),
        _ascii(p.kv_item_len),
        b"",  # packed state item lens
        b"",  # packed state dim per tensor
        b"",  # staging base ptr
        b"",  # staging total size
        _ascii(p.num_slots),
        b",".join(b"VRAM" for _ in p.kv_ptrs),  # kv mem kinds
        _pack_q([p.kv_item_len] * len(p.kv_ptrs)),  # kv item lens
    ]
    if layout == "v0523":
        frames += [
            b"",  # packed state layer ids
            b"".join(struct.pack("I", i) for i in range(len(p.kv_ptrs))),  # kv layer ids
            b"1",  # dcp size
            b"0",  # dcp rank
            b"",  # packed state data lens
        ]
    return frames


def transfer_info_frames(
    version: str,
    room: int,
    peer: DecodePeer | None = None,
    *,
    kv_indices: Sequence[int] = (),
    aux_index: int = 0,
    required_dst_info_num: int = 1,
    decode_prefix_len: int = 0,
) -> list[bytes]:
    """The decode rank's transfer info for ``room``: ``[GUARD, room, ip, port, agent, kv_indices, …]``.

    When all ``required_dst_info_num`` decode ranks reported, the prefill marks the room
    ``WaitingForInput``. 0.5.15.post1: 10 frames (``NixlKVReceiver.send_metadata``); 0.5.23: 11 frames
    (``build_receiver_metadata_message`` adds ``is_dummy``). Empty ``kv_indices`` (the default) make a
    *dummy* transfer that the real transfer_worker completes (``Success``) without calling NIXL.
    """
    layout = frame_layout(version)
    p = peer or DecodePeer()
    is_dummy = len(kv_indices) == 0
    frames = [
        GUARD,
        _ascii(room),
        _ascii(p.ip),
        _ascii(p.port),
        _ascii(p.agent_name),
        b"".join(struct.pack("i", i) for i in kv_indices),  # int32 page indices
        _ascii(aux_index),
        _ascii(required_dst_info_num),
        b"",  # packed state indices
        _ascii(decode_prefix_len),
    ]
    if layout == "v0523":
        frames.append(_ascii(int(is_dummy)))
    return frames


def abort_frames(version: str, room: int, peer: DecodePeer | None = None) -> list[bytes]:
    """The decode rank's abort notification: ``[b"ABORT", room, decode_ip, decode_port]``.

    Sent by ``CommonKVReceiver.abort()`` for each aborted request with a pending transfer (0.5.13+).
    Same 4 frames in 0.5.15.post1 and 0.5.23 (0.5.23 appends a 5th, the generation, only when the
    decode runs with deferred KV release, which is off by default).
    """
    frame_layout(version)
    p = peer or DecodePeer()
    return [ABORT, _ascii(room), _ascii(p.ip), _ascii(p.port)]


class DecodePusher:
    """A loopback ZMQ PUSH socket connected to a prefill PULL endpoint, as a decode rank has.

    Use as a context manager; ``send`` pushes one multipart message. Closing lingers at most
    ``linger_ms`` for unsent messages.
    """

    def __init__(self, endpoint: str, linger_ms: int = 1000) -> None:
        import zmq

        self.endpoint = endpoint
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PUSH)
        self._sock.setsockopt(zmq.LINGER, linger_ms)
        self._sock.connect(endpoint)

    def send(self, frames: Sequence[bytes]) -> None:
        self._sock.send_multipart(list(frames))

    def close(self) -> None:
        self._sock.close()
        self._ctx.term()

    def __enter__(self) -> DecodePusher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------------
# Loading SGLang's conn module
# ---------------------------------------------------------------------------------------------------


def load_conn_module(conn_file: Path | str | None = None) -> ModuleType:
    """Import ``sglang.srt.disaggregation.nixl.conn`` (heavy: torch and SGLang, ~5-10 s).

    With ``conn_file`` (a pristine or patched copy of that file), the copy is executed under the real
    module name in place of the installed one, so everything else comes from the installed SGLang.
    Call it at most once per process with a given file: a second, different file is refused.
    """
    if conn_file is None:
        return importlib.import_module(CONN_MODULE)
    path = Path(conn_file).resolve()
    loaded = sys.modules.get(CONN_MODULE)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "")).resolve() == path:
            return loaded
        raise NixlCpuError(
            f"{CONN_MODULE} is already loaded from {loaded.__file__}; use a fresh process for {path}"
        )
    if not path.is_file():
        raise NixlCpuError(f"{path} does not exist; build the runtime (pdfleet.patch.runtime) first")
    parent_name, _, child = CONN_MODULE.rpartition(".")
    parent = importlib.import_module(parent_name)
    spec = importlib.util.spec_from_file_location(CONN_MODULE, path)
    if spec is None or spec.loader is None:
        raise NixlCpuError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CONN_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(CONN_MODULE, None)
        raise
    setattr(parent, child, module)
    return module


# ---------------------------------------------------------------------------------------------------
# The prefill side
# ---------------------------------------------------------------------------------------------------


class _StopWorker:
    """Queue item that ends a transfer_worker: reading ``.room`` raises SystemExit (outside its try)."""

    @property
    def room(self) -> int:
        raise SystemExit(0)


@dataclass
class CpuPrefill:
    """A real ``NixlKVManager`` (prefill mode) with its real threads, on CPU and loopback ZMQ.

    Build it with :meth:`start`. ``manager`` is the SGLang object itself (read ``request_status``,
    ``transfer_infos``, ``decode_kv_args_table`` … directly if needed).
    """

    conn: ModuleType
    manager: Any
    host: str
    port: int
    bootstrap_thread: threading.Thread
    transfer_threads: list[threading.Thread] = field(default_factory=list)
    _stopped: bool = False

    @classmethod
    def start(
        cls,
        conn: ModuleType,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        engine_rank: int = 0,
        transfer_workers: int = 1,
        attn_tp_size: int = 1,
    ) -> CpuPrefill:
        """Build the manager, bind its PULL socket on ``host:port`` (0: a free port) and start threads.

        ``conn`` is the imported conn module (:func:`load_conn_module`). ``host`` is loopback in tests and
        the simulated host's own address on the sim bridge when a sim worker runs it. Starts the real
        bootstrap thread and ``transfer_workers`` real transfer workers. ``engine_rank`` and ``attn_tp_size``
        say which TP rank of how many this manager is (a TP prefill runs one manager per rank).
        """
        import zmq

        mgr = object.__new__(conn.NixlKVManager)
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PULL)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            if port:
                sock.bind(f"tcp://{host}:{port}")
            else:
                port = sock.bind_to_random_port(f"tcp://{host}")
        except zmq.ZMQError as e:
            sock.close()
            ctx.term()
            raise NixlCpuError(f"cannot bind tcp://{host}:{port} ({e}); pick another port or pass 0") from e
        _init_prefill_state(conn, mgr, ctx, sock, host, port, engine_rank, transfer_workers, attn_tp_size)

        before = set(threading.enumerate())
        mgr._start_bootstrap_thread()
        started = [t for t in threading.enumerate() if t not in before]
        if len(started) != 1:
            raise NixlCpuError(f"expected _start_bootstrap_thread to start one thread, saw {len(started)}")
        prefill = cls(conn=conn, manager=mgr, host=host, port=port, bootstrap_thread=started[0])
        for i, queue in enumerate(mgr.transfer_queues):
            t = threading.Thread(
                target=mgr.transfer_worker,
                args=(queue, None, i) if _worker_takes_index(mgr) else (queue, None),
                name=f"pdfleet-transfer-worker-{i}",
                daemon=True,
            )
            t.start()
            prefill.transfer_threads.append(t)
        return prefill

    @property
    def endpoint(self) -> str:
        """``tcp://host:port`` of the PULL socket, for :class:`DecodePusher`."""
        return f"tcp://{self.host}:{self.port}"

    # -- rooms -----------------------------------------------------------------------------------

    def open_room(self, room: int) -> None:
        """Do what the prefill ``KVSender`` does for a new request: the room becomes Bootstrapping."""
        self.manager.update_status(room, self.conn.KVPoll.Bootstrapping)

    def status(self, room: int) -> int | None:
        """The room's ``KVPoll`` value (0 Failed … 4 Success), or None when the manager has none."""
        value = self.manager.request_status.get(room)
        return None if value is None else int(value)

    def status_name(self, room: int) -> str:
        """The room's ``KVPoll`` state by name (``"Failed"``, ``"WaitingForInput"`` …) or ``"unknown"``."""
        value = self.status(room)
        return UNKNOWN if value is None else KVPOLL_NAMES.get(value, str(value))

    def has_transfer_info(self, room: int) -> bool:
        return room in self.manager.transfer_infos

    def enqueue_chunk(self, room: int, *, last: bool = True, aux_index: int = 0) -> None:
        """Do what ``NixlKVSender.send`` does: queue an (empty) KV chunk on the room's worker queue.

        For a room whose transfer info is dummy the real worker completes it (``Success``); for an
        aborted or cleared room a patched worker skips it.
        """
        import numpy as np

        queues = self.manager.transfer_queues
        chunk = self.conn.TransferKVChunk(
            room=room,
            prefill_kv_indices=np.zeros(0, dtype=np.int32),
            index_slice=slice(0, 0),
            is_last_chunk=last,
            prefill_aux_index=aux_index if last else None,
            state_indices=None,
        )
        queues[room % len(queues)].put(chunk)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.01) -> bool:
        """Poll ``predicate`` until it is true or ``timeout`` seconds pass; return its last value."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate():
                return True
            if time.monotonic() >= deadline:
                return bool(predicate())
            time.sleep(interval)

    def wait_for_status(self, room: int, name: str, timeout: float = 5.0) -> bool:
        """Wait until the room's state is ``name`` (see :meth:`status_name`)."""
        return self.wait_for(lambda: self.status_name(room) == name, timeout)

    # -- liveness --------------------------------------------------------------------------------

    def bootstrap_alive(self) -> bool:
        """Whether the real bootstrap thread (the PULL socket's only reader) is still running."""
        return self.bootstrap_thread.is_alive()

    def transfer_workers_alive(self) -> bool:
        return bool(self.transfer_threads) and all(t.is_alive() for t in self.transfer_threads)

    # -- teardown --------------------------------------------------------------------------------

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the threads and free the socket; return True when every thread ended in ``timeout``.

        Terminating the ZMQ context makes the bootstrap thread's ``recv`` raise ContextTerminated,
        which ends it (patched threads return quietly; a pristine thread that is still alive dies of
        it). Workers get a stop item. Idempotent.
        """
        if self._stopped:
            return not self.bootstrap_thread.is_alive()
        self._stopped = True
        for queue in self.manager.transfer_queues:
            queue.put(_StopWorker())
        ctx = self.manager._zmq_ctx
        sock = self.manager.server_socket
        terminator = threading.Thread(target=ctx.term, name="pdfleet-zmq-term", daemon=True)
        if self.bootstrap_thread.is_alive():
            terminator.start()  # term() wakes the blocked recv with ContextTerminated
            self.bootstrap_thread.join(timeout)
        if not self.bootstrap_thread.is_alive():
            sock.close(linger=0)  # safe now: its only reader has ended
            if terminator.ident is None:
                ctx.term()
            else:
                terminator.join(timeout)
        for t in self.transfer_threads:
            t.join(timeout)
        return not self.bootstrap_thread.is_alive() and not any(t.is_alive() for t in self.transfer_threads)

    def __enter__(self) -> CpuPrefill:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _worker_takes_index(mgr: Any) -> bool:
    return mgr.transfer_worker.__code__.co_argcount >= 4  # (self, queue, staging_buffer, worker_index)


def _init_prefill_state(
    conn: ModuleType,
    mgr: Any,
    ctx: Any,
    sock: Any,
    host: str,
    port: int,
    engine_rank: int,
    transfer_workers: int,
    attn_tp_size: int = 1,
) -> None:
    """Set what ``CommonKVManager``/``NixlKVManager.__init__`` would, for the prefill threads only.

    A superset across 0.5.15.post1 … 0.5.23; attributes a version does not read are harmless.
    """
    from collections import defaultdict
    from types import SimpleNamespace

    kv_args = SimpleNamespace(engine_rank=engine_rank, pp_rank=0, system_dp_rank=0, gpu_id=engine_rank)
    mgr.kv_args = kv_args
    mgr.disaggregation_mode = conn.DisaggregationMode.PREFILL
    mgr.is_mla_backend = False
    mgr.is_hybrid_mla_backend = False
    mgr._kv_replica_factor = 1
    mgr.local_ip = host
    mgr.rank_port = port
    mgr._zmq_ctx = ctx
    mgr.server_socket = sock
    mgr.request_status = {}
    mgr.failure_records = {}
    mgr.failure_lock = threading.Lock()
    mgr.exceptions = {}
    mgr.transfer_infos = {}
    mgr.req_to_decode_prefix_len = {}
    mgr.decode_kv_args_table = {}
    mgr.attn_tp_size = attn_tp_size
    mgr.attn_tp_rank = engine_rank % attn_tp_size
    mgr.pp_size = 1
    mgr.pp_rank = 0
    mgr.enable_staging = False
    mgr._staging_ctx = None
    mgr.enable_deferred_decode_kv_release = False
    mgr.deferred_bootstrap = None
    mgr._staging_outstanding = defaultdict(int)
    mgr._deferred_ack_targets = {}
    mgr._deferred_ack_poisoned_rooms = set()
    mgr.transfer_queues = [conn.FastQueue() for _ in range(max(1, transfer_workers))]

    def record_peer(info: Any) -> None:
        # CPU stand-in for NixlKVManager._add_remote_peer: no NIXL agent to register memory with.
        mgr.decode_kv_args_table[info.agent_name] = info

    mgr._add_remote_peer = record_peer
