"""The `pdfleet` command: a thin layer over the package's modules.

Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pdfleet import conformance, patchcli, patchstatus
from pdfleet.cluster import plan_inventory
from pdfleet.errors import PdfleetError
from pdfleet.ops import cli as ops_cli
from pdfleet.paths import DEFAULT_INVENTORY
from pdfleet.planner import Plan
from pdfleet.render import render_plan
from pdfleet.sim import cli as sim_cli
from pdfleet.table import format_table
from pdfleet.verify import cli as verify_cli
from pdfleet.watchdog import cli as watchdog_cli


def _inventory_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--inventory", type=Path, default=DEFAULT_INVENTORY,
                   help="inventory directory or file (default: the simulated cluster, inventory/sim)")


def plan_table(plan: Plan) -> str:
    rows = []
    for host, units in plan.hosts.items():
        for u in units:
            ports = " ".join(f"{k}={v}" for k, v in u.ports.items())
            rows.append([host, u.name, u.role, u.cuda_visible_devices or "-", ports])
    head = (f"profile {plan.profile}  model {plan.model['name']}  SGLang {plan.sglang['version']} "
            f"(patch {plan.sglang['patch']})  CUDA {plan.cuda['version']}  router {plan.router_url}")
    cmds = "\n".join(f"{u.host}/{u.name}: {u.exec_start_line}" for u in plan.units())
    table = format_table(["host", "unit", "role", "CUDA_VISIBLE_DEVICES", "ports"], rows)
    return f"{head}\n\n{table}\n\nlaunch commands:\n{cmds}"


def cmd_plan(args: argparse.Namespace) -> int:
    plan = plan_inventory(args.inventory)
    print(json.dumps(plan.to_dict(), indent=2, sort_keys=True) if args.json else plan_table(plan))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    plan = plan_inventory(args.inventory)
    written = render_plan(plan, args.output)
    for path in written:
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pdfleet", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="validate the inventory model and print the GPU split, ports, commands")
    _inventory_arg(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("render", help="render the systemd units and env files of every host (preview)")
    _inventory_arg(p)
    p.add_argument("-o", "--output", type=Path, required=True, help="output directory (<dir>/<host>/...)")
    p.set_defaults(func=cmd_render)

    for register in (patchcli.register, patchstatus.register, sim_cli.register, verify_cli.register,
                     conformance.register, watchdog_cli.register, ops_cli.register):
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except PdfleetError as exc:
        print(f"pdfleet: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("pdfleet: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
