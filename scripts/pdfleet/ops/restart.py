"""`pdfleet ops restart PAIR`: the watchdog's steps by hand (drain, restart, isolated gate, back in), which never
takes a pair out of the router unless it can put it back.

Before anything is drained, every host of the pair is asked whether the SSH user may restart units there: as root,
or through `sudo -n` (non-interactive; sudo that asks for a password counts as no). A user who may not is refused
with the pair untouched. Then the pair's lease (``pdfleet.lease``, on the gateway host) is taken: held by the
watchdog or a rollout, the restart is refused with the pair untouched, naming the holder. It is released once the
pair is back; a restart or gate that fails after the drain says that the pair is still out of the router, that
ops keeps its lease (as a drain: the watchdog and the rollout leave it alone), and how to bring it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pdfleet import fleet
from pdfleet.lease import LeaseError
from pdfleet.lease_client import Leases
from pdfleet.ops.tasks import FAILED, OK, HostLine, Runner
from pdfleet.privilege import AccessError, privileged, restart_prefix
from pdfleet.remote import RemoteError
from pdfleet.watchdog.actions import RestartError


class PairActions(Protocol):
    """The watchdog's steps on one pair (pdfleet.watchdog.actions.FleetActions)."""

    def restart(self, pair: fleet.Pair) -> None: ...

    def gate(self, pair: fleet.Pair) -> tuple[bool, str]: ...

    def readd(self, pair: fleet.Pair, specs: list[fleet.WorkerSpec] | None) -> tuple[bool, str]: ...


@dataclass
class RestartSteps:
    """What a restart does, each part replaceable (tests give fakes)."""

    drain: Callable[[fleet.Pair], fleet.DrainResult]
    actions: Callable[[Runner], PairActions]  # built on the runner that has the rights to restart and read journals
    warn: Callable[[str], None]
    drain_timeout_s: float
    leases: Callable[[], Leases] | None = None  # the pair leases (None: not coordinated)
    lease_ttl_s: float = 3600.0  # drain, restart (model load), gate: the lease is not renewed meanwhile


def restart_pair(pair: fleet.Pair, run: Runner, steps: RestartSteps) -> HostLine:
    """Check access on every host of the pair, then drain, restart, gate and put the pair back."""
    hosts = sorted({m.host for m in pair.members})
    try:
        prefixes = {h: restart_prefix(run, h) for h in hosts}
    except (AccessError, RemoteError) as e:
        return HostLine(pair.host, FAILED, f"not restarted, nothing drained (the pair still serves): {e}")
    store: Leases | None = None
    if steps.leases is not None:
        try:
            store = steps.leases()
            store.acquire(pair.host, "restart", steps.lease_ttl_s)
        except LeaseError as e:
            return HostLine(pair.host, FAILED, f"not restarted, nothing drained (the pair still serves): {e}")
    actions = steps.actions(privileged(run, prefixes))
    drained = steps.drain(pair)
    if not drained.ok:
        steps.warn(f"{pair.host}: not idle after {steps.drain_timeout_s:g} s, restarting anyway: "
                   f"{drained.idle.describe()}")

    def out_of_router() -> str:
        return (f"the pair is OUT of the router (drained){_keep(store, pair.host)}: fix the cause, then run "
                f"`pdfleet ops restart {pair.host}` again, or `pdfleet ops undrain {pair.host}` to put it back "
                "as it is")

    try:
        actions.restart(pair)
    except (RestartError, RemoteError) as e:
        return HostLine(pair.host, FAILED, f"restart failed: {e}; {out_of_router()}")
    ok, why = actions.gate(pair)
    if not ok:
        return HostLine(pair.host, FAILED, f"restarted but the gate failed: {why}; {out_of_router()}")
    ok, why = actions.readd(pair, drained.removed or None)
    if not ok:
        return HostLine(pair.host, FAILED, f"restarted and gated, but not confirmed back in the router: {why}; "
                                           f"{out_of_router()}")
    return HostLine(pair.host, OK, f"restarted, gated and back in the router ({why}){_release(store, pair.host)}")


def _keep(store: Leases | None, host: str) -> str:
    """Keep the lease of a pair left out (as a drain, no expiry); what to say about it."""
    if store is None:
        return ""
    try:
        store.acquire(host, "drain", None)
    except LeaseError as e:
        return f"; its lease could not be kept: {e}"
    return "; ops keeps its lease (as a drain: the watchdog and the rollout leave it alone)"


def _release(store: Leases | None, host: str) -> str:
    if store is None:
        return ""
    try:
        store.release(host)
    except LeaseError as e:
        return f"; its lease could not be released: {e}"
    return "; lease released"
