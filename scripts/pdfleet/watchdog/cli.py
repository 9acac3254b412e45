"""``pdfleet watchdog``: the standing wedge watchdog, in the foreground or as pdfleet-watchdog.service.

    pdfleet watchdog run -i INVENTORY [--remediation restart]       # from the control machine (journal over SSH)
    pdfleet watchdog run --plan /etc/pdfleet/watchdog-plan.json --local-host router1   # the deployed unit
    pdfleet watchdog status [--state-file FILE] [--json]            # each pair's state and last transition

Exit codes (status): 0 every pair OK, 1 a pair is not OK or the state is stale, 2 no state to read.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pdfleet import fleet
from pdfleet.errors import PdfleetError
from pdfleet.inventory import InventorySource
from pdfleet.inventory_flags import add_vault_arguments, source_from_args
from pdfleet.lease_client import Leases, LocalLeases, RemoteLeases
from pdfleet.paths import DEFAULT_INVENTORY
from pdfleet.privilege import AccessError, restart_prefix
from pdfleet.remote import RemoteError
from pdfleet.table import format_table
from pdfleet.versions import LEASE_DIR, PINS, router_module
from pdfleet.watchdog.actions import FleetActions, RestartError, local_shell, privileged_ssh
from pdfleet.watchdog.journal import JournalWatch, Runner, local_runner
from pdfleet.watchdog.loop import Config, Watchdog
from pdfleet.watchdog.remediate import MODES, Remediator
from pdfleet.watchdog.statefile import DEFAULT_STATE_FILE, StateFileError, read_state


class WatchdogUsageError(PdfleetError):
    """Bad arguments for `pdfleet watchdog` (exit 2)."""


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be above 0")
    return value


def _cluster(args: argparse.Namespace) -> tuple[dict[str, fleet.Pair], str, str | None, str, str, str]:
    """(pairs, model, SGLang version, router URL, the router's host, the router's module) from --plan or the
    inventory."""
    if args.plan is not None:
        try:
            plan: dict[str, Any] = json.loads(args.plan.read_text())
        except (OSError, ValueError) as e:
            raise WatchdogUsageError(f"{args.plan}: cannot read the plan document: {e} (the pdfleet_watchdog "
                                     "role writes it; or run `pdfleet plan --json > FILE`)") from None
        pairs = fleet.pairs_from_plan_dict(plan)
        model, sglang, router_url = plan.get("model") or {}, plan.get("sglang") or {}, plan.get("router_url")
        gateway = str(plan.get("gateway_host") or "")
    else:
        from pdfleet.inventory_plan import plan_inventory

        p = plan_inventory(source_from_args(args))
        pairs, model, sglang, router_url = fleet.pairs_from_plan(p), p.model, p.sglang, p.router_url
        gateway = p.gateway_host() or ""
    if not pairs or not router_url:
        raise WatchdogUsageError(f"{args.plan or args.inventory}: the plan has no worker pairs or no router")
    package = str(sglang.get("router_package") or PINS["sglang_router_package"])
    try:
        module = router_module(package)
    except ValueError as e:
        raise WatchdogUsageError(f"{args.plan or args.inventory}: {e}") from None
    return (pairs, str(model.get("served_name") or model.get("name")), sglang.get("version"), str(router_url), gateway,
            module)


def _ssh_runner(inventory: InventorySource) -> Runner:
    from pdfleet.inventory import load_inventory
    from pdfleet.remote import RemoteError, connection_for, run

    inv = load_inventory(inventory)

    def runner(host: str, command: str) -> tuple[int, str, str]:
        try:
            return run(connection_for(inv, host), command, timeout=60)
        except RemoteError as e:
            return 255, "", str(e)

    return runner


def _runners(args: argparse.Namespace) -> tuple[Runner | None, frozenset[str] | None, Runner]:
    """(journal runner, hosts it can read, unit-restart runner) for where this watchdog runs."""
    ssh = _ssh_runner(source_from_args(args)) if args.plan is None else None
    local = frozenset({args.local_host}) if args.local_host else frozenset()
    mode = args.journal
    if mode == "auto":
        mode = "ssh" if ssh is not None else "local" if local else "none"
    if mode == "ssh" and ssh is None:
        raise WatchdogUsageError("--journal ssh needs an inventory (-i), not --plan")
    if mode == "local" and not local:
        raise WatchdogUsageError("--journal local needs --local-host (this host's inventory name)")
    journal: Runner | None = {"ssh": ssh, "local": local_runner, "none": None}[mode]
    hosts = None if mode == "ssh" else local if mode == "local" else None

    remote = privileged_ssh(ssh) if ssh is not None else None

    def shell(host: str, command: str) -> tuple[int, str, str]:
        if host in local:
            return local_shell(host, command)
        if remote is not None:
            return remote(host, command)
        raise RestartError(f"cannot restart units on {host} from here: it is not this host ({args.local_host}) "
                           "and no inventory was given for SSH (run the watchdog from the control machine with -i)")

    return journal, hosts, shell


def _leases(args: argparse.Namespace, gateway: str) -> Leases | None:
    """The pair leases the remediation takes (alert mode takes none): in this process on the gateway host (the
    deployed unit: --local-host is the router's host), else on the gateway host over SSH, as root or `sudo -n`."""
    if args.remediation != "restart":
        return None
    if args.plan is not None or args.local_host == gateway:
        return LocalLeases("watchdog", directory=args.lease_dir)
    if not gateway:
        raise WatchdogUsageError(f"{args.plan or args.inventory}: the plan has no router host for the pair leases")
    ssh = _ssh_runner(source_from_args(args))
    try:
        prefix = restart_prefix(ssh, gateway)
    except (AccessError, RemoteError) as e:
        raise WatchdogUsageError(f"remediation restart needs the pair leases on the router host: {e}") from None
    return RemoteLeases(ssh, gateway, "watchdog", prefix, directory=args.lease_dir)


def cmd_run(args: argparse.Namespace) -> int:
    pairs, model, version, router_url, gateway, module = _cluster(args)
    journal_runner, journal_hosts, shell = _runners(args)
    # the gateway's key: $PDFLEET_ROUTER_API_KEY (the deployed unit: the router's secrets file), else the inventory's
    from pdfleet.routerkey import find_key

    router = fleet.RouterClient(router_url, api_key=find_key(
        None, source_from_args(args) if args.plan is None else None))
    from pdfleet.watchdog.metrics import WatchdogMetrics

    metrics = WatchdogMetrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port, args.metrics_address)
    actions = FleetActions(router, model, version, shell, journal_runner, args.router_python or sys.executable,
                           args.startup_timeout, router_module=module)
    remediator = Remediator(args.remediation, args.max_restarts, actions, leases=_leases(args, gateway))
    config = Config(args.interval, args.canary_deadline, args.failures, args.stall_window, args.state_file)
    dog = Watchdog(pairs, model, config, router, remediator, metrics,
                   journal=JournalWatch(journal_runner) if journal_runner else None, journal_hosts=journal_hosts)
    remediator.log = dog.log
    if args.state_file is not None and args.state_file.exists():
        try:
            remediator.restore(read_state(args.state_file), pairs)
        except StateFileError as e:  # a damaged file must not stop the watchdog: start with a clean slate
            dog.log(f"remediation not restored: {e}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    dog.run(stop, args.rounds)
    return 0 if all(t.state.value == "OK" for t in dog.trackers.values()) or args.rounds is None else 1


def _when(epoch: float | None) -> str:
    if not epoch:
        return "-"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_status(args: argparse.Namespace) -> int:
    doc = read_state(args.state_file)
    interval = float((doc.get("config") or {}).get("interval_s", 15.0))
    age = time.time() - float(doc.get("updated", 0))
    stale = age > 3 * interval + float((doc.get("config") or {}).get("canary_deadline_s", 20.0)) * 2
    bad = [h for h, p in doc["pairs"].items() if p.get("state") != "OK"]
    if args.json:
        print(json.dumps({"ok": not bad and not stale, "stale": stale, "age_s": round(age, 1),
                          "pairs": {h: {"state": p["state"], "since": p["since"], "since_utc": _when(p["since"]),
                                        **{k: v for k, v in p.items() if k not in ("state", "since")}}
                                    for h, p in doc["pairs"].items()},
                          "remediation": doc.get("remediation"), "transitions": doc.get("transitions", [])},
                         indent=2, sort_keys=True))
    else:
        rows = []
        for host, p in doc["pairs"].items():
            lat = p.get("last_latency_s")
            rows.append([host, p["state"], _when(p.get("since")), str(p.get("consecutive_failures", 0)),
                         "-" if lat is None else f"{lat:.2f}s", _when(p.get("last_success")),
                         {True: "yes", False: "no", None: "?"}[p.get("in_router")],
                         "; ".join(p.get("reasons") or []) or "-"])
        print(format_table(["pair", "state", "since (UTC)", "fails", "canary", "last success", "in router",
                            "why"], rows))
        if stale:
            print(f"STALE: the state file was last written {age:.0f} s ago: is pdfleet-watchdog running?")
    return 1 if bad or stale else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("watchdog", help="the standing wedge watchdog (run, status)")
    sub = p.add_subparsers(dest="watchdog_command", required=True)
    r = sub.add_parser("run", help="watch every pair in the foreground (what pdfleet-watchdog.service runs)")
    src = r.add_mutually_exclusive_group()
    src.add_argument("-i", "--inventory", type=Path, default=DEFAULT_INVENTORY,
                     help="inventory (default: inventory/sim); journals and restarts over SSH")
    src.add_argument("--plan", type=Path, help="a plan document (pdfleet plan --json) instead of an inventory")
    add_vault_arguments(r, "for -i")
    r.add_argument("--local-host", default="", help="this host's inventory name (its journal and units are local)")
    r.add_argument("--journal", choices=("auto", "ssh", "local", "none"), default="auto",
                   help="where journals are read (auto: ssh with -i, local with --local-host)")
    r.add_argument("--interval", type=_positive, default=15.0, help="seconds between rounds (15)")
    r.add_argument("--canary-deadline", type=_positive, default=20.0, help="canary deadline in s (20)")
    r.add_argument("--failures", type=int, default=2, help="consecutive failed canaries that mean WEDGED (2)")
    r.add_argument("--stall-window", type=_positive, default=60.0,
                   help="s of work with flat progress counters that mean WEDGED (60)")
    r.add_argument("--remediation", choices=MODES, default="alert", help="alert (default) or restart")
    r.add_argument("--max-restarts", type=int, default=3, help="restarts per pair per hour, then left out (3)")
    r.add_argument("--startup-timeout", type=_positive, default=900.0,
                   help="s a restarted worker may take to answer /health (900: model load)")
    r.add_argument("--router-python", default="", help="the gateway venv's Python, for the gate's private router")
    r.add_argument("--state-file", type=Path, default=DEFAULT_STATE_FILE, help=f"({DEFAULT_STATE_FILE})")
    r.add_argument("--lease-dir", type=Path, default=LEASE_DIR,
                   help=f"the pair leases' directory on the router host ({LEASE_DIR})")
    r.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics on this port (0: off)")
    r.add_argument("--metrics-address", default="127.0.0.1", help="address for the metrics (127.0.0.1)")
    r.add_argument("--rounds", type=int, default=None, help="stop after N rounds (default: run until stopped)")
    r.set_defaults(func=cmd_run)
    s = sub.add_parser("status", help="each pair's state and the time of its last transition")
    s.add_argument("--state-file", type=Path, default=DEFAULT_STATE_FILE, help=f"({DEFAULT_STATE_FILE})")
    s.add_argument("--json", action="store_true", help="machine-readable")
    s.set_defaults(func=cmd_status)
