"""``pdfleet launchcheck``: parse and resolve an inventory's launch lines with the pinned SGLang itself."""

from __future__ import annotations

import argparse
import json

from pdfleet.inventory_flags import add_inventory_arguments, source_from_args
from pdfleet.launchcheck import check
from pdfleet.table import format_table

SHOWN = ("attention_backend", "moe_runner_backend", "kv_cache_dtype", "page_size", "max_running_requests",
         "sparse_prefill")


def settings_rows(items: list[tuple[str, str, dict[str, object], str | None]]) -> str:
    """(unit, sglang, settings, stopped_at) -> the table `pdfleet plan` and `pdfleet launchcheck` print."""
    rows = [[unit, ver, *[str(s.get(k, "-")) for k in SHOWN], stop or "complete"] for unit, ver, s, stop in items]
    return format_table(["unit", "SGLang", "attention", "MoE runner", "kv-cache dtype", "page size",
                         "max running", "sparse prefill", "resolution"], rows)


def cmd_launchcheck(args: argparse.Namespace) -> int:
    source = source_from_args(args)
    versions = args.sglang or None
    plans = [(source.describe(), check.plan_at(source, v)) for v in (versions or check.pins())]
    report = check.check_plans(plans, resolve=not args.parse_only)
    if args.json:
        print(json.dumps({"problems": report.problems, "units": [vars(r) for r in report.results]}, indent=2))
    else:
        workers = [r for r in report.results if r.kind == "worker" and not r.refused]
        if workers and not args.parse_only:
            print(settings_rows([(r.unit, r.sglang, r.settings, r.stopped_at) for r in workers]))
        for r in report.results:
            for note in r.notes:
                print(f"note: {r.unit} (SGLang {r.sglang}): {note}")
        print(f"{len(report.results) - len(report.problems)} of {len(report.results)} launch lines accepted")
        for problem in report.problems:
            print(f"pdfleet: {problem}")
    return 1 if report.problems else 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("launchcheck", help="parse every launch line with the pinned SGLang's and router's own "
                                           "parsers, and resolve the effective settings (needs the CPU runtime)")
    add_inventory_arguments(p)
    p.add_argument("--sglang", action="append", default=[], metavar="VERSION",
                   help="check at this pinned version (repeatable; default: every patched version)")
    p.add_argument("--parse-only", action="store_true", help="parse only; skip SGLang's argument resolution")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=cmd_launchcheck)
