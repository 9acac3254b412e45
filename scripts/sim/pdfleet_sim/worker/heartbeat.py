"""The decode's heartbeat to the prefills it knows, and what it does when one stops answering.

Follows SGLang's decode-side ``CommonKVManager`` (``sglang/srt/disaggregation/common/conn.py``; our own
code, read from both pinned versions):

* Settings (``__init__``, 0.5.15.post1 conn.py:195-202, 0.5.23 conn.py:478-485): the interval is
  ``SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL`` (default 5.0, ``environ.py``: 0.5.15.post1 line 325,
  0.5.23 line 761) but at least 2 s; the failure limit is ``SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE``
  (default 2, line 326 / 762) but at least 1.
* The loop (``_start_heartbeat_checker_thread``, 0.5.15.post1 conn.py:668-715, 0.5.23 conn.py:1998-2054):
  sleep one interval, then ``GET http://<bootstrap_addr>/health`` for every prefill address the decode
  resolved (its ``prefill_info_table``), one after the other, with a 2 s connect and a 3 s read timeout.
  200 resets that address's failure count; anything else (a status, a refused connection, a time-out)
  adds one. At the limit the node-failure handler runs for the address.
* The handler (``_handle_node_failure``, 0.5.15.post1 conn.py:721-764, 0.5.23 conn.py:2060-2106): drop
  the cached connection and parallel info of that prefill, disconnect its rank sockets, and fail every
  tracked room of it that has not succeeded with ``Lost connection with prefill instance
  (bootstrap_addr: ...)``; the next request to that address resolves and registers again.
  0.5.23 also forgets the failure count (conn.py:2078-2080); 0.5.15.post1 keeps it, so a prefill that a
  later request reaches again is dropped at its first missed heartbeat.

The one thing a heartbeat cannot see: a prefill that is back (``/health`` 200) before the limit was
reached. Its count is reset and the decode keeps the registration of the dead process for good. The
planner keeps a prefill down long enough that this cannot happen (see ``pdfleet.planner``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import ClientSession

logger = logging.getLogger("pdfleet_sim.worker.heartbeat")

INTERVAL_VAR = "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL"
MAX_FAILURE_VAR = "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE"
DEFAULT_INTERVAL_S = 5.0
DEFAULT_MAX_FAILURES = 2
MIN_INTERVAL_S = 2.0  # conn.py clamps the interval: max(env, 2.0)
MIN_MAX_FAILURES = 1  # and the limit: max(env, 1)
CONNECT_TIMEOUT_S = 2.0  # session.get(..., timeout=(2, 3))
READ_TIMEOUT_S = 3.0
# The first pinned version whose node-failure handler forgets the failure count (0.5.23 conn.py:2080).
FORGETS_COUNT_FROM = (0, 5, 23)


class HeartbeatSettingsError(ValueError):
    """A heartbeat variable SGLang would not parse."""


@dataclass(frozen=True)
class HeartbeatSettings:
    """The decode's effective heartbeat settings (after SGLang's clamps)."""

    interval_s: float = DEFAULT_INTERVAL_S
    max_failures: int = DEFAULT_MAX_FAILURES
    forget_count_on_failure: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str], sglang_version: str) -> HeartbeatSettings:
        raw_interval = env.get(INTERVAL_VAR, "")
        raw_failures = env.get(MAX_FAILURE_VAR, "")
        try:
            interval = float(raw_interval) if raw_interval else DEFAULT_INTERVAL_S
        except ValueError:
            raise HeartbeatSettingsError(f"{INTERVAL_VAR}={raw_interval!r} is not a number (e.g. 5)") from None
        try:
            failures = int(raw_failures) if raw_failures else DEFAULT_MAX_FAILURES
        except ValueError:
            raise HeartbeatSettingsError(f"{MAX_FAILURE_VAR}={raw_failures!r} is not an integer (e.g. 2)") from None
        return cls(interval_s=max(interval, MIN_INTERVAL_S), max_failures=max(failures, MIN_MAX_FAILURES),
                   forget_count_on_failure=_release(sglang_version) >= FORGETS_COUNT_FROM)


def _release(version: str) -> tuple[int, ...]:
    """'0.5.15.post1' -> (0, 5, 15); an unreadable version counts as new. (The sim hosts carry only
    pdfleet_sim.worker, not pdfleet.versions.)"""
    parts: list[int] = []
    for part in version.split("+")[0].split(".")[:3]:
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts) if len(parts) == 3 else (999,)


class PrefillHeartbeat:
    """Checks every known prefill's bootstrap ``/health`` and reports the ones that stopped answering."""

    def __init__(
        self,
        settings: HeartbeatSettings,
        session: ClientSession,
        addresses: Callable[[], list[str]],
        on_failure: Callable[[str], object],
    ) -> None:
        self.settings = settings
        self._session = session
        self._addresses = addresses
        self._on_failure = on_failure
        self.failures: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.interval_s)
            try:
                await self.check_round()
            except asyncio.CancelledError:
                raise
            except Exception:  # the checker thread never dies in SGLang either
                logger.exception("heartbeat round failed")

    async def _healthy(self, addr: str) -> bool:
        import aiohttp

        timeout = aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S)
        try:
            async with self._session.get(f"http://{addr}/health", timeout=timeout) as resp:
                await resp.read()
                return resp.status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def check_round(self) -> list[str]:
        """One round over the known prefills; returns the addresses handed to the failure handler."""
        failed: list[str] = []
        for addr in self._addresses():
            if await self._healthy(addr):
                self.failures[addr] = 0
            else:
                logger.info("Attempting to reconnect to %s...", addr)
                self.failures[addr] = self.failures.get(addr, 0) + 1
            if self.failures.get(addr, 0) >= self.settings.max_failures:
                if self.settings.forget_count_on_failure:
                    self.failures.pop(addr, None)
                self._on_failure(addr)
                failed.append(addr)
        return failed
