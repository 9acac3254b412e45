"""`pdfleet ops drain / undrain` and the pair leases (``pdfleet.lease``) every ops command takes on the gateway host.

* drain: the lease (kind ops, purpose drain, no expiry) is taken before the pair leaves the router and kept: the
  watchdog and the rollout leave the pair alone until `undrain` puts it back and releases it. Held by the watchdog
  or a rollout: refused, the pair untouched.
* undrain: refused when the watchdog or a rollout holds the pair (it would put back what they took out), unless
  the watchdog left the pair out for a person (purpose left_out: putting it back is that person's call) or
  ``--break-lease`` is given. The lease is held while the pair goes back, released once routing is confirmed, and
  kept as a drain when it is not.
"""

from __future__ import annotations

from collections.abc import Callable

from pdfleet import fleet
from pdfleet.lease import LeaseError, LeaseHeld
from pdfleet.lease_client import Leases, RemoteLeases
from pdfleet.ops.tasks import FAILED, OK, HostLine, Runner
from pdfleet.planner import Plan
from pdfleet.privilege import AccessError, restart_prefix
from pdfleet.remote import RemoteError

# What undrain may take over without --break-lease: a pair the watchdog left out for a person to put back.
UNDRAIN_TAKEOVER = ("watchdog:left_out",)
UNDRAIN_TTL_S = 600.0  # held while the pair goes back (readd's probes), then released


def gateway_host(plan: Plan) -> str:
    """The router's host: where the lease store is."""
    host = plan.gateway_host()
    if host is None:
        raise LeaseError("the plan has no router unit, so there is no gateway host for the pair leases")
    return host


def ops_leases(plan: Plan, run: Runner) -> RemoteLeases:
    """The leases on the gateway host as `pdfleet ops` holds them: as root or through `sudo -n` (the rights check
    of `ops restart`); LeaseError naming the host and the fix otherwise."""
    host = gateway_host(plan)
    try:
        prefix = restart_prefix(run, host)
    except (AccessError, RemoteError) as e:
        raise LeaseError(f"the pair leases on the router host cannot be taken: {e}") from None
    return RemoteLeases(run, host, "ops", prefix)


def drain_pair(pair: fleet.Pair, leases: Callable[[], Leases],
               drain: Callable[[fleet.Pair], fleet.DrainResult]) -> HostLine:
    try:
        leases().acquire(pair.host, "drain", None)
    except LeaseError as e:
        return HostLine(pair.host, FAILED, f"not drained (the pair still serves): {e}")
    try:
        res = drain(pair)
    except (fleet.RouterError, fleet.FleetError) as e:
        return HostLine(pair.host, FAILED, f"drain failed: {e}; the pair may be partly out of the router and its "
                                           f"lease is held by ops: `pdfleet ops undrain {pair.host}` puts it back "
                                           "and releases it")
    text = (f"{len(res.removed)} worker(s) out of the router; {res.idle.describe()}; its lease is held by ops until "
            f"`pdfleet ops undrain {pair.host}`")
    return HostLine(pair.host, OK if res.ok else FAILED, text)


def undrain_pair(pair: fleet.Pair, leases: Callable[[], Leases],
                 readd: Callable[[fleet.Pair], fleet.ReaddResult], break_lease: bool = False) -> HostLine:
    takeover = ("*",) if break_lease else UNDRAIN_TAKEOVER
    try:
        store = leases()
        taken_from = store.read(pair.host)
        store.acquire(pair.host, "undrain", UNDRAIN_TTL_S, takeover)
    except LeaseHeld as e:
        return HostLine(pair.host, FAILED, f"not put back: {e}")
    except LeaseError as e:
        return HostLine(pair.host, FAILED, f"not put back (the pair stays out): {e}")
    broke = (f" (lease broken: it was held by {taken_from.describe()})"
             if taken_from is not None and taken_from.kind != "ops" else "")
    res = readd(pair)
    if not res.confirmed:
        try:
            store.acquire(pair.host, "drain", None, ("*",))  # still out: held as a drain, as before
            kept = "its lease is held by ops as a drain"
        except LeaseError as e:
            kept = f"its lease could not be kept: {e}"
        return HostLine(pair.host, FAILED, f"{'; '.join(res.problems)}; {kept}{broke}")
    try:
        store.release(pair.host)
        released = "lease released"
    except LeaseError as e:
        released = f"its lease could not be released: {e}"
    return HostLine(pair.host, OK, f"back in the router, routing confirmed after {res.probes} probe(s); "
                                   f"{released}{broke}")
