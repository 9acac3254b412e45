"""``pdfleet rollout plan -i INV`` (what rollout.yml will do, before anything changes),
``pdfleet rollout status -i INV`` (each host's version, patch, router membership and whether it serves) and
``pdfleet rollout page REPORT`` (the report's HTML page again, with the outcomes of a client load that ran
alongside drawn against the rollout; rollout.yml writes the page without them).

Plan and status only read: the records over SSH, the router's ``GET /workers``, and (status) one real request
through each pair. Exit codes: 0 ok (plan: it may go ahead; status: every host at the target, in the router and
serving), 1 refused / a host is not, 2 could not read the fleet (page: the report or the load).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pdfleet.errors import PdfleetError
from pdfleet.fleet.canary import pair_canary
from pdfleet.htmlreport import write_rollout_page
from pdfleet.inventory_flags import add_inventory_arguments, source_from_args
from pdfleet.rollout import plan as rollout_plan
from pdfleet.rollout.collect import collect
from pdfleet.rollout.health import DEFAULT_DEADLINE_S, apply_health, check_serving_pairs
from pdfleet.rollout.report import SCHEMA
from pdfleet.routerkey import find_key
from pdfleet.table import format_table


class FleetUnreadable(PdfleetError):
    exit_code = 2


def _serial(text: str) -> list[int | str]:
    out: list[int | str] = []
    for item in text.split(","):
        item = item.strip()
        if not item or not (item.rstrip("%").isdigit()):
            raise argparse.ArgumentTypeError(f"serial entries are counts or percentages (1,1 or 1,50%): {text!r}")
        out.append(item if item.endswith("%") else int(item))
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("rollout", help="rolling rollout: plan (before), status (any time)")
    sub = p.add_subparsers(dest="rollout_command", required=True)
    for name, func, text in (("plan", cmd_plan, "what rollout.yml will do, before anything changes"),
                             ("status", cmd_status, "each host's version, patch, router membership, serving")):
        q = sub.add_parser(name, help=text)
        add_inventory_arguments(q)
        q.add_argument("--json", action="store_true", help="print JSON")
        if name == "plan":
            q.add_argument("--serial", type=_serial, default=list(rollout_plan.DEFAULT_SERIAL),
                           help="batch sizes, as rollout.yml's pdfleet_rollout_serial (default 1,1)")
            q.add_argument("--min-pairs", type=int, default=None,
                           help="pairs that must keep serving (default 1, 0 on a one-pair cluster; a value given is "
                                "kept strictly, as rollout.yml's pdfleet_rollout_min_pairs)")
            q.add_argument("--allow-degraded", action="store_true",
                           help="plan even when a serving pair fails its direct canary (rollout.yml: "
                                "pdfleet_rollout_allow_degraded)")
            q.add_argument("--canary-deadline", type=float, default=DEFAULT_DEADLINE_S,
                           help=f"s for each serving pair's direct canary (default {DEFAULT_DEADLINE_S:g})")
        q.set_defaults(func=func)
    q = sub.add_parser("page", help="write a rollout report's HTML page (optionally with a client load's outcomes)")
    q.add_argument("report", type=Path, help="the rollout's JSON report (reports/rollout-<time>/rollout.json)")
    q.add_argument("--client-load", type=Path, default=None,
                   help='JSON list of the requests a client sent during the rollout: {"started": epoch, "seconds": '
                        's, "kind": "ok" | "failed" | "cut"} each')
    q.set_defaults(func=cmd_page)


def _collect(args: argparse.Namespace) -> tuple[dict, list, str]:
    # the gateway's key: $PDFLEET_ROUTER_API_KEY, else the inventory's (pdfleet.routerkey)
    source = source_from_args(args)
    plan, states, router_error = collect(source, find_key(None, source))
    unreadable = [s.record_error for s in states if s.record_error]
    if router_error or unreadable:
        raise FleetUnreadable("; ".join([router_error, *unreadable]).strip("; "))
    return plan, states, router_error


def cmd_plan(args: argparse.Namespace) -> int:
    doc, states, _ = _collect(args)
    plan = rollout_plan.build(states, args.serial, args.min_pairs)
    model = str(doc["model"].get("served_name") or doc["model"]["name"])
    apply_health(plan, check_serving_pairs(states, model, args.canary_deadline), args.allow_degraded)
    print(json.dumps(plan.to_dict(), indent=2, sort_keys=True) if args.json else rollout_plan.table(plan))
    return 1 if plan.refusal else 0


def cmd_status(args: argparse.Namespace) -> int:
    plan, states, _ = _collect(args)
    model = str(plan["model"].get("served_name") or plan["model"]["name"])
    rows, out, ok = [], [], True
    for s in states:
        serving = None
        if s.pair is not None:
            c = pair_canary(s.pair, model, deadline_s=30)
            serving = c.ok and s.membership == "in"
            canary = c.to_dict()
        else:
            canary = None
        inst = s.installed
        good = s.at_target and (s.pair is None or bool(serving))
        ok &= good
        rows.append([s.host, inst.version if inst else "-", (inst.patch_id if inst.patched else "pristine")
                     if inst else "-", s.membership, "-" if serving is None else "yes" if serving else "NO",
                     "; ".join(s.diffs) or "at target"])
        out.append({**s.to_dict(), "serving": serving, "canary": canary})
    if args.json:
        print(json.dumps({"ok": ok, "hosts": out}, indent=2, sort_keys=True))
    else:
        print(format_table(["host", "version", "patch", "router", "serving", "target"], rows))
    return 0 if ok else 1


class PageInputError(PdfleetError):
    exit_code = 2


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PageInputError(f"{what} {path}: {e}") from e


def cmd_page(args: argparse.Namespace) -> int:
    report = _read_json(args.report, "report")
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        raise PageInputError(f"report {args.report}: not a pdfleet rollout report (schema {SCHEMA})")
    client = None
    if args.client_load is not None:
        client = _read_json(args.client_load, "--client-load")
        if not isinstance(client, list):
            raise PageInputError(f"--client-load {args.client_load}: expected a JSON list of request outcomes")
    print(f"page: {write_rollout_page(args.report, report, client)}")
    return 0
