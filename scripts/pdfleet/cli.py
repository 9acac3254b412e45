"""The `pdfleet` command: a thin layer over the package's modules.

Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from pdfleet import conformance, keygen
from pdfleet.errors import PdfleetError
from pdfleet.inventory import InventorySource, load_inventory
from pdfleet.inventory_flags import add_inventory_arguments, source_from_args
from pdfleet.inventory_plan import plan_inventory
from pdfleet.launchcheck import cli as launchcheck_cli
from pdfleet.launchcheck import store as launchstore
from pdfleet.ops import cli as ops_cli
from pdfleet.patch import cli as patchcli
from pdfleet.patch import status as patchstatus
from pdfleet.plandoc import plan_document
from pdfleet.planner import Plan, Unit, hardware_facts, systemd_quote, without_key_shim
from pdfleet.prune.decide import removal_rows, removals
from pdfleet.prune.hoststate import read_units
from pdfleet.render import render_plan
from pdfleet.rollout import cli as rollout_cli
from pdfleet.table import format_table
from pdfleet.verify import cli as verify_cli
from pdfleet.watchdog import cli as watchdog_cli


def _inventory_arg(p: argparse.ArgumentParser) -> None:
    add_inventory_arguments(p)


def plan_table(plan: Plan) -> str:
    rows = []
    for host, units in plan.hosts.items():
        for u in units:
            ports = " ".join(f"{k}={v}" for k, v in u.ports.items())
            rows.append([host, u.name, u.role, u.cuda_visible_devices or "-", ports])
    head = (f"profile {plan.profile}  model {plan.model['name']}  SGLang {plan.sglang['version']} "
            f"(patch {plan.sglang['patch']})  CUDA {plan.cuda['version']}  router {plan.router_url}")
    cmds = "\n".join(f"{u.host}/{u.name}: {_shown_command(u)}" for u in plan.units())
    table = format_table(["host", "unit", "role", "CUDA_VISIBLE_DEVICES", "ports"], rows)
    return f"{head}\n\n{table}\n\n{hardware_text(plan)}\n\nlaunch commands:\n{cmds}\n\n{effective_settings_text(plan)}"


def _shown_command(unit: Unit) -> str:
    """The unit's command as it runs once its key shim (planner.key_shim) has added the key from its secrets file:
    the shim's code says nothing a reader needs."""
    argv = without_key_shim(unit.exec_start)
    if argv == unit.exec_start:
        return unit.exec_start_line
    line = " ".join(systemd_quote(a) for a in argv)
    return f"{line}  (+ the key from {unit.name}-secrets.env: {', '.join(unit.secrets)})"


def hardware_text(plan: Plan) -> str:
    """The pin's hardware facts the plan applied, each with its SGLang file and condition (plan.hardware_facts)."""
    version = str(plan.sglang["version"])
    lines = [f"hardware facts (SGLang {version}, from its patch manifest; set on the units below):"]
    for f in plan.hardware_facts:
        lines.append(f"  compute capability {f['compute_capability']}: {f['kind']} {f['setting']} on "
                     f"{', '.join(map(str, f['units']))}  [{f['file']}]")
        lines += textwrap.wrap(str(f["condition"]), 112, initial_indent="      ", subsequent_indent="      ")
    applied = {str(f["compute_capability"]) for f in plan.hardware_facts}
    known = hardware_facts(version)
    for cc in sorted({str(spec.get("compute_capability")) for spec in plan.host_specs.values()} - applied):
        lines.append(f"  compute capability {cc}: " + (
            "none needed (the manifest's findings say why)" if cc in known
            else "the manifest has no section for it: nothing is set"))
    return "\n".join(lines)


def effective_settings_text(plan: Plan) -> str:
    """The workers' effective settings as SGLang resolves them (committed by the launch check), or how to get them."""
    found = launchstore.effective_settings(plan)
    known = [(u, str(e["sglang"]), e["settings"], e["stopped_at"]) for u, e in found.items() if "settings" in e]
    lines = [f"effective settings (SGLang {plan.sglang['version']}'s own resolution on the host spec's GPU):"]
    if known:
        lines.append(launchcheck_cli.settings_rows(known))
    missing = [u for u, e in found.items() if "unresolved" in e]
    if missing:
        lines.append(f"not resolved for {', '.join(missing)}: run pdfleet launchcheck -i INVENTORY (SGLang resolves "
                     "them in the CPU runtime)")
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    source = source_from_args(args)
    plan = plan_inventory(source)
    if args.removals:
        return removals_report(source, plan, args.json)
    print(json.dumps(plan_document(plan), indent=2, sort_keys=True) if args.json else plan_table(plan))
    return 0


def removals_report(source: InventorySource, plan: Plan, as_json: bool) -> int:
    """What a converge would remove on each host (read over SSH): 0 read every host, 2 a host was unreadable."""
    inventory = load_inventory(source)
    found, errors = [], []
    for host in inventory.hosts:
        try:
            found.append(removals(host, read_units(inventory, host), [u.name for u in plan.hosts.get(host, [])]))
        except PdfleetError as exc:
            errors.append(str(exc))
    if as_json:
        print(json.dumps({"ok": not errors, "hosts": [r.to_dict() for r in found], "errors": errors}, indent=2))
    else:
        rows = removal_rows(found)
        if rows:
            print(format_table(["host", "unit", "converge", "state", "url"], rows))
        elif found:
            print(f"nothing to remove on {', '.join(r.host for r in found)}")
        for error in errors:
            print(f"pdfleet: {error}", file=sys.stderr)
    return 2 if errors else 0


def cmd_render(args: argparse.Namespace) -> int:
    out: Path = args.output
    if out.exists() and not out.is_dir():
        raise PdfleetError(f"render -o {out}: is a file; give a directory (files go to <dir>/<host>/)")
    plan = plan_inventory(source_from_args(args))
    try:
        written = render_plan(plan, out)
    except OSError as e:
        raise PdfleetError(f"render -o {out}: cannot write there ({e.strerror or e}: "
                           f"{e.filename or out}); pick a writable directory") from e
    for path in written:
        print(path)
    return 0


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (exit 2), not a usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="pdfleet", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="validate the inventory model and print the GPU split, ports, commands")
    _inventory_arg(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--removals", action="store_true",
                   help="read each host over SSH and list the pdfleet units a converge would remove (and the "
                        "pdfleet-* units it leaves alone because pdfleet did not create them)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("render", help="render the systemd units and env files of every host (preview)")
    _inventory_arg(p)
    p.add_argument("-o", "--output", type=Path, required=True, help="output directory (<dir>/<host>/...)")
    p.set_defaults(func=cmd_render)

    for register in (patchcli.register, patchstatus.register, verify_cli.register,
                     conformance.register, rollout_cli.register, watchdog_cli.register, ops_cli.register,
                     launchcheck_cli.register, keygen.register):
        register(sub)
    plugins = plugin_commands()
    for _name, load in sorted(plugins.items()):
        load()(sub)
    for name, (help_text, message) in sorted(MISSING_COMMANDS.items()):
        if name not in plugins:
            # every argument (--help too) is taken as one of `rest`: the command answers with the message only
            p = sub.add_parser(name, help=help_text, add_help=False, prefix_chars="\x01")
            p.add_argument("rest", nargs="*")
            p.set_defaults(func=_missing(message))
    return parser


# Sub-commands other distributions add (their entry points in this group: name = "module:register"). The
# simulator is one: pdfleet-sim (scripts/sim/pyproject.toml) declares `sim`, so this package never imports it.
COMMAND_GROUP = "pdfleet.commands"
# What a command of another distribution is, and what to say when that distribution is not installed.
MISSING_COMMANDS = {
    "sim": ("simulated cluster (needs the separate pdfleet-sim distribution)",
            "`pdfleet sim` is the simulated cluster, the separate pdfleet-sim distribution (scripts/sim in the "
            "checkout), and it is not installed here; in a checkout, `make setup` installs it next to pdfleet "
            "(pip install -e scripts/sim)"),
}


def plugin_commands() -> dict[str, Callable[[], Callable[[argparse._SubParsersAction], None]]]:
    """name -> a loader of the register function, for each entry point of COMMAND_GROUP (not imported yet)."""
    return {ep.name: ep.load for ep in metadata.entry_points(group=COMMAND_GROUP)}


def _missing(message: str) -> Callable[[argparse.Namespace], int]:
    def run(_args: argparse.Namespace) -> int:
        print(f"pdfleet: {message}", file=sys.stderr)
        return 2
    return run


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except PdfleetError as exc:
        print(f"pdfleet: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a file or address the user named that cannot be used: one line, exit 2
        print(f"pdfleet: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pdfleet: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
