"""``pdfleet ops``: day-2 operations over SSH from the inventory.

    pdfleet ops status  [-i INV] [--json]           per host: units, SGLang version/patch, router membership,
                                                    watchdog state, last verification
    pdfleet ops logs UNIT [--since '10 min ago']    the unit's journal on every host that runs it
    pdfleet ops restart PAIR                        drain, restart, isolated gate, back in (the watchdog's steps)
    pdfleet ops drain HOST / undrain HOST           out of the router and idle / back in with routing confirmed
                                                    (undrain --break-lease: even when the watchdog or a rollout
                                                    holds the pair's lease)
    pdfleet ops canary                              a real request through every pair, no router

Drain, undrain and restart take the pair's lease on the router host first (pdfleet.lease; as root or `sudo -n`):
a pair the watchdog or a rollout holds is refused, naming the holder.

Exit codes: 0 all fine, 1 a check failed on some host, 2 a host unreachable or bad input (others still shown).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from pdfleet import fleet
from pdfleet.errors import PdfleetError
from pdfleet.inventory import InventorySource, load_inventory
from pdfleet.inventory_flags import add_inventory_arguments, source_from_args
from pdfleet.inventory_plan import plan_inventory
from pdfleet.lease import LeaseError
from pdfleet.lease_client import Leases, RemoteLeases
from pdfleet.ops import tasks
from pdfleet.ops.leasing import drain_pair, gateway_host, ops_leases, undrain_pair
from pdfleet.ops.restart import RestartSteps, restart_pair
from pdfleet.ops.tasks import OK, HostLine
from pdfleet.paths import REPO_ROOT
from pdfleet.planner import Plan
from pdfleet.remote import RemoteError, connection_for, run
from pdfleet.routerkey import find_key
from pdfleet.watchdog.actions import FleetActions


class OpsUsageError(PdfleetError):
    """Bad arguments for `pdfleet ops` (exit 2)."""


def _runner(source: InventorySource) -> tasks.Runner:
    inv = load_inventory(source)
    return lambda host, command: run(connection_for(inv, host), command, timeout=120)


def _print(lines: list[HostLine], as_json: bool) -> int:
    code = tasks.exit_code(lines)
    if as_json:
        print(json.dumps({"ok": code == OK, "exit_code": code, "hosts": [x.to_dict() for x in lines]}, indent=2))
    else:
        for line in lines:
            print(line.render())
    return code


def _router(plan: Plan, source: InventorySource) -> fleet.RouterClient:
    """The gateway with its key ($PDFLEET_ROUTER_API_KEY, else the inventory's Vault: pdfleet.routerkey)."""
    return fleet.RouterClient(plan.router_url, api_key=find_key(None, source))


def _with_plan(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Plan the inventory once before the command (a bad inventory: exit 2 with the planner's message)."""

    def wrapped(args: argparse.Namespace) -> int:
        args.source = source_from_args(args)
        args.plan = plan_inventory(args.source)
        return func(args)

    return wrapped


def _pair(args: argparse.Namespace, name: str) -> fleet.Pair:
    pairs = fleet.pairs_from_plan(args.plan)
    if name not in pairs:
        raise OpsUsageError(f"{args.source.describe()}: no pair on host {name!r} (pairs: {', '.join(pairs)})")
    return pairs[name]


def _model(args: argparse.Namespace) -> str:
    return str(args.plan.model.get("served_name") or args.plan.model["name"])


def _leases(args: argparse.Namespace, runner: tasks.Runner) -> Callable[[], Leases]:
    """The pair leases on the router host, reached (and the SSH user's rights checked) when first needed."""
    return lambda: ops_leases(args.plan, runner)


def cmd_status(args: argparse.Namespace) -> int:
    try:
        states: dict[str, str] | None = {w.spec.url: w.status for w in _router(args.plan, args.source).workers()}
    except fleet.RouterError as e:
        print(f"router: FAIL: {e}", file=sys.stderr)
        states = None
    last = tasks.latest_verification(REPO_ROOT / "reports")
    runner = _runner(args.source)
    try:  # reading needs no rights: the records are 0644 in a 0755 directory
        leases = {x.pair: x for x in RemoteLeases(runner, gateway_host(args.plan), "ops").list()}
    except (LeaseError, RemoteError) as e:
        print(f"leases: unknown: {e}", file=sys.stderr)
        leases = None
    return _print(tasks.status(args.plan, runner, states, last, leases), args.json)


def cmd_logs(args: argparse.Namespace) -> int:
    found = tasks.logs(args.plan, _runner(args.source), args.unit, args.since)
    if not found:
        raise OpsUsageError(f"{args.source.describe()}: no host runs unit {args.unit!r}")
    for line, text in found:
        for entry in text.splitlines():
            print(f"{line.host}: {entry}")
    for line, _ in found:
        if line.code != OK:
            print(line.render(), file=sys.stderr)
    return tasks.exit_code([line for line, _ in found])


def cmd_canary(args: argparse.Namespace) -> int:
    return _print(tasks.canary(fleet.pairs_from_plan(args.plan), _model(args), args.deadline), args.json)


def cmd_drain(args: argparse.Namespace) -> int:
    pair = _pair(args, args.host)
    leases = _leases(args, _runner(args.source))

    def one(host: str) -> HostLine:
        return drain_pair(pair, leases, lambda p: fleet.drain(_router(args.plan, args.source), p, args.timeout))

    return _print(tasks.parallel([pair.host], one), args.json)


def cmd_undrain(args: argparse.Namespace) -> int:
    pair = _pair(args, args.host)
    leases = _leases(args, _runner(args.source))

    def one(host: str) -> HostLine:
        return undrain_pair(pair, leases, lambda p: fleet.readd(_router(args.plan, args.source), p, None,
                                                                _model(args)), args.break_lease)

    return _print(tasks.parallel([pair.host], one), args.json)


def cmd_restart(args: argparse.Namespace) -> int:
    pair = _pair(args, args.pair)
    router = _router(args.plan, args.source)
    runner = _runner(args.source)
    steps = RestartSteps(
        drain=lambda p: fleet.drain(router, p, args.timeout),
        actions=lambda run: FleetActions(router, _model(args), args.plan.sglang.get("version"), run, run,
                                         startup_timeout_s=args.startup_timeout),
        warn=lambda text: print(text, file=sys.stderr),
        drain_timeout_s=args.timeout,
        leases=_leases(args, runner),
        lease_ttl_s=args.timeout + args.startup_timeout + 1800.0)
    return _print(tasks.parallel([pair.host], lambda host: restart_pair(pair, runner, steps)), args.json)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ops", help="day-2 operations over SSH (status, logs, restart, drain, undrain, canary)")
    sub = p.add_subparsers(dest="ops_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        add_inventory_arguments(q)
        q.add_argument("--json", action="store_true", help="machine-readable")

    q = sub.add_parser("status", help="per host: units, versions, patch, router membership, watchdog, verification")
    common(q)
    q.set_defaults(func=_with_plan(cmd_status))
    q = sub.add_parser("logs", help="a unit's journal on every host that runs it")
    common(q)
    q.add_argument("unit")
    q.add_argument("--since", default="1 hour ago", help="journalctl --since (default: 1 hour ago)")
    q.set_defaults(func=_with_plan(cmd_logs))
    q = sub.add_parser("restart", help="drain a pair, restart its units, gate it, put it back")
    common(q)
    q.add_argument("pair", help="the pair's host")
    q.add_argument("--timeout", type=float, default=120.0, help="s to wait for idle after leaving the router")
    q.add_argument("--startup-timeout", type=float, default=900.0, help="s for the restarted workers' /health")
    q.set_defaults(func=_with_plan(cmd_restart))
    for name, func, text in (("drain", cmd_drain, "take a host's pair out of the router and wait for idle"),
                             ("undrain", cmd_undrain, "put a host's pair back and confirm routing")):
        q = sub.add_parser(name, help=text)
        common(q)
        q.add_argument("host")
        if name == "drain":
            q.add_argument("--timeout", type=float, default=120.0, help="s to wait for idle")
        else:
            q.add_argument("--break-lease", action="store_true",
                           help="put the pair back even when the watchdog or a rollout holds its lease")
        q.set_defaults(func=_with_plan(func))
    q = sub.add_parser("canary", help="a real request through every pair (no router)")
    common(q)
    q.add_argument("--deadline", type=float, default=20.0, help="s per canary (20)")
    q.set_defaults(func=_with_plan(cmd_canary))
