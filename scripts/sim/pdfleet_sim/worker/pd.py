"""Prefill/decode glue: the bootstrap server, the decode's handshake, the KV-ready channel.

What follows SGLang (0.5.x, NIXL backend):

* The prefill worker serves the bootstrap HTTP API on ``--disaggregation-bootstrap-port``:
  ``PUT /route`` registers a prefill rank's ``rank_ip``/``rank_port``; ``GET /route`` with all four
  ranks at -1 returns the prefill's parallel layout, with real ranks returns one rank's socket;
  503 until every expected rank registered. ``/register_dp_rank``, ``/query_dp_ranks``, ``/health``.
* A TP prefill has one KV manager per TP rank, each on its own port and registered under its own
  ``attn_tp_rank`` (``register_to_bootstrap``, common/conn.py:390 in 0.5.15.post1, :1562 in 0.5.23).
* A decode worker asks that API once per prefill address: the layout, then, for each of its own TP
  ranks, the prefill ranks that rank reads from (``_resolve_rank_mapping``, common/conn.py:281 / :1432;
  ``_setup_bootstrap_infos``, :1002 / :2614). Each decode rank is its own NIXL agent: it pushes its
  KV-args registration to each of its target prefill rank sockets, then per request pushes transfer info
  for the room to each of them; a prefill rank's reader thread marks the room ``WaitingForInput`` when
  ``required_dst_info_num`` decode ranks reported.
* A request aborted while its transfer is pending makes every decode rank push the version's ``ABORT``
  frames to every prefill rank it targets (``_send_abort_notification``: a loop over ``bootstrap_infos``,
  common/conn.py:1195 / :2977; best effort, 1 s send timeout here).

What is the simulator's own: the KV bytes never move. When the prefill finished its simulated
forward pass it pushes ``[PDFLEET_KV_READY, room]`` to the decode peer(s) recorded for the room by
the prefill's reader thread (the endpoint from the decode's transfer info), on a ZMQ PULL socket the
decode binds for that purpose.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pdfleet_sim.worker.kv import DecodeFrames, DecodePeer

if TYPE_CHECKING:
    from aiohttp import ClientSession, web

logger = logging.getLogger("pdfleet_sim.worker.pd")

KV_READY = b"PDFLEET_KV_READY"
ABORT_SEND_TIMEOUT_S = 1.0


class BootstrapError(RuntimeError):
    """The decode could not resolve the prefill rank socket from the bootstrap server."""


@dataclass
class RankEntry:
    rank_ip: str
    rank_port: int


class BootstrapTable:
    """The prefill's bootstrap registry (the state behind SGLang's bootstrap server routes)."""

    def __init__(self) -> None:
        self.attn_tp_size: int | None = None
        self.attn_cp_size: int | None = None
        self.pp_size: int | None = None
        self.dp_size: int | None = None
        self.page_size: int | None = None
        self.kv_cache_dtype: str | None = None
        self.follow_bootstrap_room: bool | None = None
        self.ranks: dict[tuple[int, int, int, int], RankEntry] = {}
        self.room_to_dp_rank: dict[int, int] = {}

    def register(self, data: dict[str, Any]) -> None:
        """``PUT /route``: one prefill rank announces its socket."""
        system_dp_size = int(data["system_dp_size"])
        if self.attn_tp_size is None:
            self.attn_tp_size = int(data["attn_tp_size"])
        if self.attn_cp_size is None:
            self.attn_cp_size = int(data["attn_cp_size"])
        if self.pp_size is None:
            self.pp_size = int(data["pp_size"])
        if self.dp_size is None:
            self.dp_size = int(data["attn_dp_size"]) if system_dp_size == 1 else system_dp_size
        if self.page_size is None and data.get("page_size") is not None:
            self.page_size = int(data["page_size"])
        if self.kv_cache_dtype is None and data.get("kv_cache_dtype") is not None:
            self.kv_cache_dtype = str(data["kv_cache_dtype"])
        if self.follow_bootstrap_room is None:
            method = data.get("load_balance_method", "follow_bootstrap_room")
            self.follow_bootstrap_room = method == "follow_bootstrap_room"
        dp_group = int(data["attn_dp_rank"]) if system_dp_size == 1 else int(data["system_dp_rank"])
        key = (dp_group, int(data["attn_cp_rank"]), int(data["attn_tp_rank"]), int(data["pp_rank"]))
        self.ranks[key] = RankEntry(rank_ip=str(data["rank_ip"]), rank_port=int(data["rank_port"]))

    def expected(self) -> int | None:
        sizes = (self.dp_size, self.attn_cp_size, self.attn_tp_size, self.pp_size)
        if any(s is None for s in sizes):
            return None
        out = 1
        for s in sizes:
            out *= int(s)  # type: ignore[arg-type]
        return out

    def ready(self) -> bool:
        expected = self.expected()
        return expected is not None and len(self.ranks) >= expected

    def layout(self) -> dict[str, Any]:
        return {
            "attn_tp_size": self.attn_tp_size,
            "attn_cp_size": self.attn_cp_size,
            "dp_size": self.dp_size,
            "pp_size": self.pp_size,
            "page_size": self.page_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "follow_bootstrap_room": True if self.follow_bootstrap_room is None else self.follow_bootstrap_room,
        }


def bootstrap_app(table: BootstrapTable) -> web.Application:
    """The aiohttp application served on the prefill's bootstrap port."""
    from aiohttp import web

    async def route(request: web.Request) -> web.Response:
        if request.method == "PUT":
            table.register(await request.json())
            return web.Response(text="OK")
        if request.method != "GET":
            return web.Response(text="Method not allowed", status=405)
        names = ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")
        raw = [request.query.get(n) for n in names]
        if not all(raw):
            return web.Response(text="Missing inputs for bootstrap server.", status=400)
        try:
            key = tuple(int(v) for v in raw)  # type: ignore[arg-type]
        except ValueError:
            return web.Response(text="Bootstrap ranks must be integers.", status=400)
        if not table.ready():
            return web.Response(
                text=f"Prefill server not fully registered yet ({len(table.ranks)} workers registered).",
                status=503,
            )
        if key == (-1, -1, -1, -1):
            return web.json_response(table.layout())
        entry = table.ranks.get(key)  # type: ignore[arg-type]
        if entry is None:
            return web.Response(
                text=f"Bootstrap info not found for dp_rank={key[0]} cp_rank={key[1]} "
                f"tp_rank={key[2]} pp_rank={key[3]}",
                status=404,
            )
        return web.json_response({"rank_ip": entry.rank_ip, "rank_port": entry.rank_port})

    async def register_dp_rank(request: web.Request) -> web.Response:
        data = await request.json()
        table.room_to_dp_rank[int(data["bootstrap_room"])] = int(data["dp_rank"])
        return web.Response(text="OK")

    async def query_dp_ranks(request: web.Request) -> web.Response:
        data = await request.json()
        rooms = [int(r) for r in data.get("bootstrap_rooms", [])]
        return web.json_response({str(r): table.room_to_dp_rank[r] for r in rooms if r in table.room_to_dp_rank})

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="OK")

    app = web.Application()
    app.router.add_route("*", "/route", route)
    app.router.add_post("/register_dp_rank", register_dp_rank)
    app.router.add_post("/query_dp_ranks", query_dp_ranks)
    app.router.add_get("/health", health)
    return app


def rank_registration(
    rank_ip: str, rank_port: int, page_size: int, kv_cache_dtype: str, tp_rank: int = 0, tp_size: int = 1
) -> dict[str, Any]:
    """The ``PUT /route`` body of one prefill TP rank (DP/CP/PP collapsed to 1 in the simulator)."""
    return {
        "attn_tp_size": tp_size, "attn_tp_rank": tp_rank, "attn_cp_size": 1, "attn_cp_rank": 0,
        "attn_dp_size": 1, "attn_dp_rank": 0, "pp_size": 1, "pp_rank": 0,
        "system_dp_size": 1, "system_dp_rank": 0,
        "rank_ip": rank_ip, "rank_port": rank_port, "page_size": page_size,
        "kv_cache_dtype": kv_cache_dtype, "load_balance_method": "follow_bootstrap_room",
    }


def target_tp_ranks(decode_rank: int, decode_tp: int, prefill_tp: int) -> tuple[list[int], int]:
    """The prefill TP ranks one decode rank reads KV from, and ``required_dst_info_num`` (how many decode
    ranks each of those prefill ranks waits for): SGLang's ``_resolve_rank_mapping`` for non-MLA-sharded
    KV, CP and PP 1 (common/conn.py:281-358 in 0.5.15.post1; :1432 in 0.5.23)."""
    small, large = sorted((decode_tp, prefill_tp))
    if small < 1 or large % small:
        raise BootstrapError(f"decode TP {decode_tp} and prefill TP {prefill_tp}: one must divide the other")
    rank = decode_rank % decode_tp
    if decode_tp == prefill_tp:
        return [rank], 1
    if decode_tp > prefill_tp:
        per = decode_tp // prefill_tp
        return [rank // per], per
    per = prefill_tp // decode_tp
    return list(range(rank * per, (rank + 1) * per)), 1


@dataclass(frozen=True)
class RankRoute:
    """One (decode rank -> prefill rank) link of a prefill target."""

    decode_rank: int
    prefill_tp_rank: int
    rank_ip: str
    rank_port: int
    required_dst_info_num: int

    @property
    def endpoint(self) -> str:
        host = f"[{self.rank_ip}]" if ":" in self.rank_ip else self.rank_ip
        return f"tcp://{host}:{self.rank_port}"


@dataclass
class PrefillTarget:
    """A prefill worker (its bootstrap address) and every rank link a decode request pushes to."""

    addr: str
    routes: list[RankRoute] = field(default_factory=list)

    @property
    def endpoints(self) -> list[str]:
        return sorted({r.endpoint for r in self.routes})


class DecodeLink:
    """Decode side: resolves prefill rank sockets, pushes frames, receives KV-ready notices."""

    def __init__(self, frames: DecodeFrames, local_ip: str, session: ClientSession, tp_size: int = 1) -> None:
        import zmq
        import zmq.asyncio

        self._zmq = zmq
        self.frames = frames
        self.local_ip = local_ip
        self.tp_size = max(1, tp_size)  # this decode's TP ranks; each is its own NIXL agent in SGLang
        self._hits: Counter[str] = Counter()  # transfer infos sent, per prefill bootstrap address
        self._session = session
        self._ctx = zmq.asyncio.Context()
        self._pull = self._ctx.socket(zmq.PULL)
        self._pull.setsockopt(zmq.LINGER, 0)
        self.local_port = self._pull.bind_to_random_port(f"tcp://{local_ip}")
        self._push: dict[str, Any] = {}
        self._targets: dict[str, PrefillTarget] = {}
        self._resolving: dict[str, asyncio.Lock] = {}
        self._ready: dict[int, asyncio.Event] = {}
        self._listener: asyncio.Task[None] | None = None
        self._node_failures = NodeFailureState()

    def start(self) -> None:
        self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        while True:
            frames = await self._pull.recv_multipart()
            if len(frames) >= 2 and frames[0] == KV_READY:
                room = int(frames[1].decode("ascii"))
                self._node_failures.succeeded(room)
                self._ready.setdefault(room, asyncio.Event()).set()
            else:
                logger.warning("decode KV channel: ignored a message with leading frame %r", frames[0][:32])

    def kv_ready_event(self, room: int) -> asyncio.Event:
        return self._ready.setdefault(room, asyncio.Event())

    def forget_room(self, room: int) -> None:
        self._ready.pop(room, None)
        self._node_failures.untrack(room)

    def _socket(self, endpoint: str) -> Any:
        sock = self._push.get(endpoint)
        if sock is None:
            sock = self._ctx.socket(self._zmq.PUSH)
            sock.setsockopt(self._zmq.LINGER, 0)
            sock.connect(endpoint)
            self._push[endpoint] = sock
        return sock

    async def _get_json(self, url: str) -> Any:
        import aiohttp

        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                if resp.status != 200:
                    raise BootstrapError(f"Failed to get prefill server info: {resp.status}, {await resp.text()}")
                return await resp.json()
        except (TimeoutError, aiohttp.ClientError) as e:
            raise BootstrapError(f"Error fetching prefill info from bootstrap: {e}") from e

    async def resolve(self, bootstrap_host: str, bootstrap_port: int) -> PrefillTarget:
        """Every prefill rank socket this decode's ranks read from, for one bootstrap address; registers
        each decode rank's KV args with each of its target prefill ranks on first use."""
        host = f"[{bootstrap_host}]" if ":" in bootstrap_host else bootstrap_host
        addr = f"{host}:{bootstrap_port}"
        target = self._targets.get(addr)
        if target is not None:
            return target
        lock = self._resolving.setdefault(addr, asyncio.Lock())
        async with lock:
            target = self._targets.get(addr)
            if target is not None:
                return target
            base = f"http://{addr}/route"
            layout = await self._get_json(f"{base}?prefill_dp_rank=-1&prefill_cp_rank=-1"
                                          "&target_tp_rank=-1&target_pp_rank=-1")
            if not isinstance(layout, dict) or "attn_tp_size" not in layout:
                raise BootstrapError(f"Unexpected prefill layout from {addr}: {layout!r}")
            prefill_tp = int(layout["attn_tp_size"])
            sockets: dict[int, tuple[str, int]] = {}
            target = PrefillTarget(addr=addr)
            for decode_rank in range(self.tp_size):
                ranks, required = target_tp_ranks(decode_rank, self.tp_size, prefill_tp)
                for tp_rank in ranks:
                    if tp_rank not in sockets:
                        info = await self._get_json(f"{base}?prefill_dp_rank=0&prefill_cp_rank=0"
                                                    f"&target_tp_rank={tp_rank}&target_pp_rank=0")
                        sockets[tp_rank] = (str(info["rank_ip"]), int(info["rank_port"]))
                    ip, port = sockets[tp_rank]
                    target.routes.append(RankRoute(decode_rank, tp_rank, ip, port, required))
            for route in target.routes:
                await self._socket(route.endpoint).send_multipart(
                    self.frames.register(self.local_ip, self.local_port, route.decode_rank, self.tp_size)
                )
            logger.debug("Registered KV args of %d decode rank(s) with prefill %s (%s)", self.tp_size, addr,
                         ", ".join(target.endpoints))
            self._targets[addr] = target
            return target

    async def send_transfer_info(self, target: PrefillTarget, room: int, num_pages: int) -> None:
        """Each decode rank tells each of its prefill ranks where the room's KV goes."""
        for route in target.routes:
            frames = self.frames.transfer_info(room, self.local_ip, self.local_port, num_pages,
                                               route.decode_rank, route.required_dst_info_num)
            await self._socket(route.endpoint).send_multipart(frames)
        self._hits[target.addr] += 1

    def prefill_hits(self) -> dict[str, int]:
        """Requests whose transfer info went to each prefill (by bootstrap address)."""
        return dict(self._hits)

    async def send_abort(self, target: PrefillTarget, room: int) -> bool:
        """Every decode rank notifies every prefill rank it targets. Best effort, like SGLang: a send that
        cannot complete in 1 s is dropped. True when every notification went out."""
        frames = self.frames.abort(room, self.local_ip, self.local_port)

        async def one(route: RankRoute) -> bool:
            try:
                await asyncio.wait_for(self._socket(route.endpoint).send_multipart(frames), ABORT_SEND_TIMEOUT_S)
            except (TimeoutError, self._zmq.ZMQError) as e:
                logger.debug("Failed to send abort notification for room %s to %s: %s", room, route.endpoint, e)
                return False
            logger.debug("Sent abort notification for room %s to %s", room, route.endpoint)
            return True

        return all(await asyncio.gather(*(one(r) for r in target.routes)))

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
        for sock in self._push.values():
            sock.close(0)
        self._pull.close(0)
        self._ctx.term()

    # ----- node failure (the heartbeat's handler; see pdfleet_sim.worker.heartbeat) ------------------
    def known_prefills(self) -> list[str]:
        """The bootstrap addresses this decode resolved (SGLang's ``prefill_info_table`` keys)."""
        return list(self._targets)

    def track_room(self, target: PrefillTarget, room: int) -> None:
        """Record that ``room`` talks to ``target`` (SGLang's ``addr_to_rooms_tracker``).

        A target the heartbeat dropped between the resolve and this call fails the room at once.
        """
        self._node_failures.track(target.addr, room)
        if self._targets.get(target.addr) is not target:
            self._node_failures.fail(room, lost_connection_reason(target.addr))
            self._ready.setdefault(room, asyncio.Event()).set()

    def room_failure(self, room: int) -> str | None:
        """Why the room failed (the prefill was declared dead), or None."""
        return self._node_failures.failure(room)

    def forget_prefill(self, addr: str) -> list[int]:
        """SGLang's ``_handle_node_failure``: drop the prefill's cached target and socket, fail its rooms."""
        target = self._targets.pop(addr, None)
        if target is not None:
            for endpoint in target.endpoints:  # every rank socket of that prefill
                sock = self._push.pop(endpoint, None)
                if sock is not None:
                    sock.close(0)
        reason = lost_connection_reason(addr)
        affected = self._node_failures.fail_addr(addr, reason)
        for room in affected:
            self._ready.setdefault(room, asyncio.Event()).set()
        logger.error("%s, %d requests affected", reason, len(affected))
        return affected


def lost_connection_reason(addr: str) -> str:
    """The failure SGLang records for rooms of a dead prefill.

    (common/conn.py: 0.5.15.post1 line 756, 0.5.23 line 2098.)
    """
    return f"Lost connection with prefill instance (bootstrap_addr: {addr})"


class NodeFailureState:
    """Rooms per prefill address and the rooms failed because their prefill was declared dead."""

    def __init__(self) -> None:
        self._rooms: dict[str, set[int]] = {}
        self._addr_of: dict[int, str] = {}
        self._failed: dict[int, str] = {}

    def track(self, addr: str, room: int) -> None:
        self._rooms.setdefault(addr, set()).add(room)
        self._addr_of[room] = addr

    def untrack(self, room: int) -> None:
        addr = self._addr_of.pop(room, None)
        if addr is not None:
            self._rooms.get(addr, set()).discard(room)
        self._failed.pop(room, None)

    def succeeded(self, room: int) -> None:
        """The room's KV arrived: a later node failure no longer concerns it (status Success)."""
        addr = self._addr_of.pop(room, None)
        if addr is not None:
            self._rooms.get(addr, set()).discard(room)

    def fail(self, room: int, reason: str) -> None:
        self._failed[room] = reason

    def fail_addr(self, addr: str, reason: str) -> list[int]:
        rooms = sorted(self._rooms.pop(addr, set()))
        for room in rooms:
            self._addr_of.pop(room, None)
            self._failed[room] = reason
        return rooms

    def failure(self, room: int) -> str | None:
        return self._failed.get(room)


class PrefillLink:
    """Prefill side of the simulator's KV-ready channel."""

    def __init__(self) -> None:
        import zmq
        import zmq.asyncio

        self._zmq = zmq
        self._ctx = zmq.asyncio.Context()
        self._push: dict[str, Any] = {}

    async def notify(self, peers: list[DecodePeer], room: int) -> None:
        for peer in peers:
            host = f"[{peer.ip}]" if ":" in peer.ip else peer.ip
            endpoint = f"tcp://{host}:{peer.port}"
            sock = self._push.get(endpoint)
            if sock is None:
                sock = self._ctx.socket(self._zmq.PUSH)
                sock.setsockopt(self._zmq.LINGER, 0)
                sock.connect(endpoint)
                self._push[endpoint] = sock
            try:
                await asyncio.wait_for(sock.send_multipart([KV_READY, str(room).encode("ascii")]), 5.0)
            except TimeoutError:
                logger.warning("KV-ready notice for room %s to %s timed out", room, endpoint)

    async def close(self) -> None:
        for sock in self._push.values():
            sock.close(0)
        self._ctx.term()
