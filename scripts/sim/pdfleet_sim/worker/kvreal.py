"""The real KV seam: SGLang's own ``NixlKVManager`` threads, through :mod:`pdfleet.patch.nixlcpu`.

Prefill: :func:`real_prefill_kv` builds one :class:`RealRankKV` per TP rank, each wrapping a
``nixlcpu.CpuPrefill``: the installed SGLang's (or a given pristine/patched copy of)
``sglang/srt/disaggregation/nixl/conn.py``, its real ``bootstrap_thread`` reading that rank's own PULL
socket, and its real ``transfer_worker`` completing each room's (dummy, KV-less) last chunk. If a rank's
thread dies, rooms stay ``Bootstrapping`` on that rank and requests hang, as in production.

Decode: :class:`RealDecodeFrames` uses nixlcpu's per-version builders, so the bytes on the wire are
what the pinned SGLang version's decode ranks push (one NIXL agent name per decode rank). Importing this
module is cheap; the conn module (torch, SGLang) is only imported when a :class:`RealRankKV` is built.
"""

from __future__ import annotations

import logging
import os
import uuid
from importlib import metadata

from pdfleet_sim.worker.kv import DecodePeer, KVPoll, ThreadState, TPPrefillKV

logger = logging.getLogger("pdfleet_sim.worker.kvreal")


def installed_sglang_version() -> str:
    """The version of the SGLang in this interpreter (no torch import), or raise a clear error."""
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        raise RuntimeError(
            "SGLang is not installed in this python: run the simulated worker with the runtime "
            "interpreter (pdfleet.patch.runtime), or set PDFLEET_SIM_KV_BACKEND=fake for a light stand-in"
        ) from None


def _version_tuple(version: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in version.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits or not part[0].isdigit():
            break
        out.append(int(digits))
    return tuple(out)


def real_prefill_kv(bind_ip: str, tp_size: int = 1, conn_file: str | None = None,
                    version: str | None = None) -> TPPrefillKV:
    """One real KV manager per TP rank, each on its own port of ``bind_ip`` (see module doc)."""
    ranks: list[RealRankKV] = []
    try:
        for rank in range(max(1, tp_size)):
            ranks.append(RealRankKV(bind_ip, conn_file, version, tp_rank=rank, tp_size=tp_size))
    except BaseException:
        for r in ranks:
            r.close()
        raise
    return TPPrefillKV(list(ranks))


class RealRankKV:
    """One TP rank's real prefill-mode ``NixlKVManager`` with its real threads (see module doc)."""

    def __init__(self, bind_ip: str, conn_file: str | None = None, version: str | None = None,
                 tp_rank: int = 0, tp_size: int = 1) -> None:
        from pdfleet.patch import nixlcpu

        self._version = version or installed_sglang_version()
        conn = nixlcpu.load_conn_module(conn_file or None)
        logger.info("KV manager of TP rank %d: %s from %s (SGLang %s)", tp_rank, conn.NixlKVManager.__name__,
                    getattr(conn, "__file__", "?"), self._version)
        self.tp_rank = tp_rank
        try:
            self._prefill = nixlcpu.CpuPrefill.start(conn, host=bind_ip, port=0, engine_rank=tp_rank,
                                                     attn_tp_size=tp_size)
        except nixlcpu.NixlCpuError as e:
            raise RuntimeError(
                f"{e}. The simulated prefill's KV socket binds {bind_ip} (PDFLEET_SIM_LOCAL_IP if set, else "
                "--host, with 0.0.0.0 meaning 127.0.0.1): it must be an address of this host that the decode "
                "worker can reach"
            ) from e
        self._mgr = self._prefill.manager

    @property
    def rank_ip(self) -> str:
        return self._prefill.host

    @property
    def rank_port(self) -> int:
        return self._prefill.port

    @property
    def sglang_version(self) -> str:
        return self._version

    @property
    def supports_bootstrap_timeout(self) -> bool:
        # The NIXL sender honours SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT from 0.5.18 on.
        return _version_tuple(self._version) >= (0, 5, 18)

    def open_room(self, room: int) -> None:
        self._prefill.open_room(room)

    def poll(self, room: int) -> int:
        status = self._prefill.status(room)
        return KVPoll.Bootstrapping if status is None else status

    def failure_reason(self, room: int) -> str | None:
        with self._mgr.failure_lock:
            reason = self._mgr.failure_records.pop(room, None)
        self._mgr.exceptions.pop(room, None)
        return None if reason is None else str(reason)

    def decode_peers(self, room: int) -> list[DecodePeer]:
        infos = dict(self._mgr.transfer_infos.get(room, {}))
        return [DecodePeer(ip=str(i.endpoint), port=int(i.dst_port), agent_name=str(i.agent_name))
                for i in infos.values()]

    def start_transfer(self, room: int) -> None:
        """Queue the room's last (KV-less) chunk on the real transfer_worker."""
        self._prefill.enqueue_chunk(room, last=True)

    def abort_room(self, room: int, reason: str) -> None:
        # What the prefill KVSender's abort() does.
        with self._mgr.failure_lock:
            self._mgr.failure_records[room] = reason
        self._mgr.update_status(room, KVPoll.Failed)

    def release_room(self, room: int) -> None:
        # What the prefill KVSender's clear() does.
        self._mgr.request_status.pop(room, None)
        self._mgr.req_to_decode_prefix_len.pop(room, None)
        with self._mgr.failure_lock:
            self._mgr.failure_records.pop(room, None)

    def threads(self) -> list[ThreadState]:
        out = [ThreadState("bootstrap_thread", self._prefill.bootstrap_alive())]
        out += [ThreadState(t.name, t.is_alive()) for t in self._prefill.transfer_threads]
        return out

    def close(self) -> None:
        self._prefill.stop(timeout=2.0)


class RealDecodeFrames:
    """The pinned SGLang version's decode frames, from nixlcpu's builders."""

    def __init__(self, version: str | None = None) -> None:
        from pdfleet.patch import nixlcpu

        self._nixlcpu = nixlcpu
        self._version = version or installed_sglang_version()
        nixlcpu.frame_layout(self._version)  # fail at startup on a version without a known layout
        self._agent = f"pdfleet-sim-decode-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def agent_name(self, rank: int = 0) -> str:
        return f"{self._agent}-tp{rank}"

    @property
    def sglang_version(self) -> str:
        return self._version

    def _peer(self, local_ip: str, local_port: int, rank: int = 0, tp_size: int = 1) -> object:
        return self._nixlcpu.DecodePeer(ip=local_ip, port=local_port, agent_name=self.agent_name(rank),
                                        gpu_id=rank, tp_size=tp_size, engine_rank=rank)

    def register(self, local_ip: str, local_port: int, rank: int = 0, tp_size: int = 1) -> list[bytes]:
        return self._nixlcpu.register_kv_args_frames(self._version, self._peer(local_ip, local_port, rank, tp_size))

    def transfer_info(self, room: int, local_ip: str, local_port: int, num_pages: int, rank: int = 0,
                      required_dst_info_num: int = 1) -> list[bytes]:
        # No KV indices: a dummy transfer, which the real transfer_worker completes without NIXL.
        return self._nixlcpu.transfer_info_frames(self._version, room, self._peer(local_ip, local_port, rank),
                                                  required_dst_info_num=required_dst_info_num)

    def abort(self, room: int, local_ip: str, local_port: int) -> list[bytes]:
        return self._nixlcpu.abort_frames(self._version, room, self._peer(local_ip, local_port))
