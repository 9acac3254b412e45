"""``python -m pdfleet_sim.worker <sglang.launch_server flags>``: a simulated SGLang worker on CPU.

Environment (all optional): ``PDFLEET_SIM_PREFILL_MS_PER_TOKEN`` (0.05), ``PDFLEET_SIM_DECODE_TOKENS_PER_S``
(40), ``PDFLEET_SIM_MAX_TOKENS_DEFAULT`` (64), ``PDFLEET_SIM_PREFILL_OVERHEAD_MS`` (2),
``PDFLEET_SIM_ABORT_DELAY_S`` (2), ``PDFLEET_SIM_KV_BACKEND`` (``sglang`` | ``fake``),
``PDFLEET_SIM_CONN_FILE`` (a pristine or patched ``nixl/conn.py`` to run instead of the installed one),
``PDFLEET_SIM_LOCAL_IP``, and SGLang's own ``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`` /
``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` / ``SGLANG_REQUEST_STATE_WAIT_TIMEOUT`` (4) /
``SGLANG_FORCE_STREAM_INTERVAL`` (50).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

from pdfleet_sim.worker.args import SettingsError, SimSettings, WorkerArgs, parse_args
from pdfleet_sim.worker.kv import TPPrefillKV

logger = logging.getLogger("pdfleet_sim.worker")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stdout,
        force=True,
    )
    # aiohttp's access log is noise at info level, as uvicorn's is muted by SGLang's default.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.server").addFilter(_quiet_protocol_probes)


_REPORT_LOCK = threading.Lock()


def _whole_thread_reports() -> None:
    """Print each dying thread's traceback whole.

    The simulator runs a worker's TP ranks as threads of one process (SGLang runs them as processes), so when
    an ABORT kills every rank's reader at once, Python's default hook interleaves their tracebacks line by
    line, and with the log lines on stdout. One lock, held together with the log handlers' locks, keeps each
    report in one piece, as separate processes' reports would be.
    """
    default = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        handlers = logging.getLogger().handlers
        with _REPORT_LOCK:
            for h in handlers:
                h.acquire()
            try:
                default(args)
                sys.stderr.flush()
            finally:
                for h in reversed(handlers):
                    h.release()

    threading.excepthook = hook


def _quiet_protocol_probes(record: logging.LogRecord) -> bool:
    """Drop aiohttp's traceback for an HTTP/2 prior-knowledge probe (the router tries one per worker)."""
    exc = record.exc_info[1] if record.exc_info else None
    if exc is not None and type(exc).__name__ == "BadHttpMessage" and "PRI" in str(exc):
        logger.debug("Ignored an HTTP/2 probe (%s)", record.getMessage())
        return False
    return True


def _local_ip(args: WorkerArgs, settings: SimSettings) -> str:
    if settings.local_ip:
        return settings.local_ip
    return "127.0.0.1" if args.host in ("0.0.0.0", "", "localhost") else args.host


async def serve(args: WorkerArgs, settings: SimSettings, stop: asyncio.Event) -> None:
    import aiohttp
    from aiohttp import web

    from pdfleet_sim.worker.heartbeat import HeartbeatSettings, PrefillHeartbeat
    from pdfleet_sim.worker.metrics import Metrics
    from pdfleet_sim.worker.pd import BootstrapTable, DecodeLink, PrefillLink, bootstrap_app, rank_registration
    from pdfleet_sim.worker.scheduler import Scheduler
    from pdfleet_sim.worker.server import SimServer

    local_ip = _local_ip(args, settings)
    metrics = Metrics(model_name=args.served_model_name, disaggregation_mode=args.disaggregation_mode)
    runners: list[web.AppRunner] = []
    kv = None
    prefill_link = decode_link = None
    heartbeat = None
    version = _sglang_version(args, settings)
    session = aiohttp.ClientSession()
    try:
        if args.disaggregation_mode == "prefill":
            kv = _prefill_kv(settings, local_ip, args.tp_size)
            version = kv.sglang_version
            table = BootstrapTable()
            for rank in kv.ranks:  # each TP rank registers its own socket, as SGLang's schedulers do
                table.register(rank_registration(rank.rank_ip, rank.rank_port, args.effective_page_size(),
                                                 args.kv_cache_dtype, rank.tp_rank, len(kv.ranks)))
            runner = web.AppRunner(bootstrap_app(table), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, args.host, args.disaggregation_bootstrap_port).start()
            runners.append(runner)
            logger.info("CommonKVBootstrapServer started successfully on %s:%s", args.host,
                        args.disaggregation_bootstrap_port)
            prefill_link = PrefillLink()
        elif args.disaggregation_mode == "decode":
            frames = _decode_frames(settings, version)
            decode_link = DecodeLink(frames, local_ip, session, tp_size=args.tp_size)
            decode_link.start()
            heartbeat = PrefillHeartbeat(HeartbeatSettings.from_env(os.environ, version), session,
                                         decode_link.known_prefills, decode_link.forget_prefill)
            heartbeat.start()
            logger.info("Prefill heartbeat: every %.1fs, %d failures declare a prefill dead",
                        heartbeat.settings.interval_s, heartbeat.settings.max_failures)
        scheduler = Scheduler(args, settings, metrics, prefill_kv=kv, prefill_link=prefill_link,
                              decode_link=decode_link)
        scheduler.start()
        sim = SimServer(args, settings, scheduler, metrics, version, kv=kv)
        runner = web.AppRunner(sim.app(), handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        await web.TCPSite(runner, args.host, args.port, backlog=1024).start()
        runners.append(runner)
        sim.status = "Up"
        logger.info("The server is fired up and ready to roll!")
        await stop.wait()
        logger.info("Shutting down the simulated worker")
        await scheduler.stop()
    finally:
        if heartbeat is not None:
            await heartbeat.stop()
        for r in reversed(runners):
            await r.cleanup()
        await session.close()
        if decode_link is not None:
            await decode_link.close()
        if prefill_link is not None:
            await prefill_link.close()
        if kv is not None:
            kv.close()


def _sglang_version(args: WorkerArgs, settings: SimSettings) -> str:
    """The SGLang version the worker reports; required only where the real KV path needs it."""
    from pdfleet_sim.worker.kvfake import fake_version
    from pdfleet_sim.worker.kvreal import installed_sglang_version

    if settings.kv_backend == "fake" or not args.is_pd:
        try:
            return installed_sglang_version()
        except RuntimeError:
            return fake_version()
    return installed_sglang_version()


def _prefill_kv(settings: SimSettings, local_ip: str, tp_size: int) -> TPPrefillKV:
    """One KV manager per TP rank (real SGLang threads, or the light stand-in)."""
    if settings.kv_backend == "fake":
        from pdfleet_sim.worker.kvfake import fake_prefill_kv

        return fake_prefill_kv(local_ip, tp_size, abort_kills_thread=settings.fake_abort_kills_thread)
    from pdfleet_sim.worker.kvreal import real_prefill_kv

    return real_prefill_kv(local_ip, tp_size, conn_file=os.environ.get("PDFLEET_SIM_CONN_FILE") or None)


def _decode_frames(settings: SimSettings, version: str):  # noqa: ANN202 - DecodeFrames protocol
    if settings.kv_backend == "fake":
        from pdfleet_sim.worker.kvfake import FakeDecodeFrames

        return FakeDecodeFrames()
    from pdfleet_sim.worker.kvreal import RealDecodeFrames

    return RealDecodeFrames(version)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        settings = SimSettings.from_env()
    except SettingsError as e:
        print(f"pdfleet_sim.worker: {e}", file=sys.stderr)
        return 2
    _setup_logging(args.log_level)
    _whole_thread_reports()
    if args.unknown_flags:
        logger.warning("Ignoring flags the simulator does not model: %s", " ".join(args.unknown_flags))
    if args.is_pd and args.disaggregation_transfer_backend != "nixl":
        logger.warning("--disaggregation-transfer-backend %s: the simulator always speaks NIXL's frames",
                       args.disaggregation_transfer_backend)
    logger.info("pdfleet simulated SGLang worker: mode=%s host=%s port=%s kv_backend=%s "
                "prefill_ms_per_token=%s decode_tokens_per_s=%s", args.disaggregation_mode, args.host,
                args.port, settings.kv_backend, settings.prefill_ms_per_token, settings.decode_tokens_per_s)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(args, settings, stop)

    try:
        asyncio.run(run())
    except Exception as e:  # startup failures: one line a person can act on, plus the traceback
        logger.exception("Cannot start the simulated worker: %s", e)
        logging.shutdown()
        return 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # SGLang's bootstrap thread is not a daemon; if it is wedged in recv, do not wait for it.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
