"""Benchmark of the planner at fleet scale: `pdfleet plan`, `pdfleet render` and the preflight's filter on
generated inventories of 10, 100 and 1,000 hosts (fleet_inventory.py: 8-GPU pd-4p4d hosts, router on the first).

For each size, one run of each stage, in process (the same calls the commands make):
  load      load_inventory: ansible-core reads hosts.yml and group_vars (as `pdfleet plan` does)
  plan      plan_of: the cluster variable templated for every host and checked equal, then the planner's rules
  table     the text `pdfleet plan` prints
  document  the JSON document of `pdfleet plan --json` and of the preflight
  render    render_plan into a scratch directory (`pdfleet render -o DIR`)
  filter    the Ansible filter pdfleet_plan with ansible-core's own hostvars (the preflight's one planning task)
  cli       `pdfleet plan -i INVENTORY` as a command, start to exit (Python's start and imports included)
`plan time` is load + plan (what the goal is about); each figure is also given per host, so a linear stage shows
the same per-host figure at every size. The goal (issue 29: 1,000 hosts planned in 2 s or less) is printed beside.

Run:  .venv/bin/python tests/bench/bench_plan_scale.py [--sizes 10,100,1000] [--per-host 2|8] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fleet_inventory, next to this file

from fleet_inventory import SHAPES, write_fleet_inventory

GOAL_HOSTS = 1000
GOAL_S = 2.0


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def preflight_filter(inventory: Any) -> Callable[[], Any]:
    """The preflight's call: the templated cluster variable, ansible-core's HostVars and the host list."""
    import importlib.util

    from ansible.vars.hostvars import HostVars
    from pdfleet.inventory import ROOT_VARIABLE
    from pdfleet.paths import REPO_ROOT

    spec = importlib.util.spec_from_file_location(
        "pdfleet_plan_filter", REPO_ROOT / "ansible" / "plugins" / "filter" / "pdfleet_plan.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cluster = inventory.shared_var(ROOT_VARIABLE)
    hostvars = HostVars(inventory=inventory._manager, variable_manager=inventory._variables, loader=inventory._loader)
    return lambda: module.pdfleet_plan(cluster, hostvars, list(inventory.host_names))


def run_size(hosts: int, per_host: int, scratch: Path) -> dict[str, Any]:
    from pdfleet.cli import plan_table
    from pdfleet.inventory import load_inventory
    from pdfleet.inventory_plan import plan_of
    from pdfleet.plandoc import plan_document
    from pdfleet.render import render_plan

    inv_dir = write_fleet_inventory(scratch / f"inv-{hosts}", hosts, per_host)
    inventory, load_s = timed(lambda: load_inventory(inv_dir))
    plan, plan_s = timed(lambda: plan_of(inventory))
    _, table_s = timed(lambda: plan_table(plan))
    _, doc_s = timed(lambda: plan_document(plan))
    files, render_s = timed(lambda: render_plan(plan, scratch / f"render-{hosts}"))
    # A fresh inventory for the filter, so no templated value of the plan above is reused.
    call = preflight_filter(load_inventory(inv_dir))
    _, filter_s = timed(call)
    units = len(plan.units())
    assert len(files) == 2 * units
    proc, cli_s = timed(lambda: subprocess.run([str(Path(sys.executable).parent / "pdfleet"), "plan", "-i",
                                                str(inv_dir)], capture_output=True, text=True, check=False))
    if proc.returncode != 0:
        raise SystemExit(f"pdfleet plan failed on {hosts} hosts: {proc.stderr.strip()}")
    return {"hosts": hosts, "units": units, "load_s": load_s, "plan_s": plan_s, "plan_time_s": load_s + plan_s,
            "table_s": table_s, "document_s": doc_s, "render_s": render_s, "filter_s": filter_s, "cli_s": cli_s}


def report(rows: list[dict[str, Any]]) -> str:
    cols = ["load_s", "plan_s", "plan_time_s", "table_s", "document_s", "render_s", "filter_s", "cli_s"]
    head = f"{'hosts':>6} {'units':>6} " + " ".join(f"{c[:-2]:>10}" for c in cols) + "   plan time per host"
    lines = [head]
    for r in rows:
        per_host_ms = 1000 * r["plan_time_s"] / r["hosts"]
        lines.append(f"{r['hosts']:>6} {r['units']:>6} " + " ".join(f"{r[c]:>9.3f}s" for c in cols)
                     + f"   {per_host_ms:.2f} ms/host")
    lines.append("per host, in ms:")
    for r in rows:
        lines.append(f"{r['hosts']:>6} {'':>6} " + " ".join(f"{1000 * r[c] / r['hosts']:>10.3f}" for c in cols))
    goal = [r for r in rows if r["hosts"] == GOAL_HOSTS]
    if goal:
        t = goal[0]["plan_time_s"]
        verdict = "meets" if t <= GOAL_S else "misses"
        lines.append(f"goal: {GOAL_HOSTS} hosts planned in <= {GOAL_S:g} s (load + plan): {t:.2f} s, {verdict} it; "
                     f"the whole `pdfleet plan` command (start, imports, printing): {goal[0]['cli_s']:.2f} s")
    else:
        lines.append(f"goal: {GOAL_HOSTS} hosts planned in <= {GOAL_S:g} s (load + plan): not measured (add "
                     f"{GOAL_HOSTS} to --sizes)")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        growth = (b["plan_time_s"] / b["hosts"]) / (a["plan_time_s"] / a["hosts"])
        lines.append(f"linearity: plan time per host at {b['hosts']} hosts / at {a['hosts']} hosts = {growth:.2f} "
                     "(about 1 or below: linear; a quadratic planner grows with the host ratio, "
                     f"{b['hosts'] / a['hosts']:g})")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,100,1000", help="host counts, comma-separated")
    ap.add_argument("--per-host", type=int, choices=SHAPES, default=2, help="worker instances per 8-GPU host")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    rows = []
    with tempfile.TemporaryDirectory(prefix="pdfleet-bench-plan-") as tmp:
        run_size(1, args.per_host, Path(tmp))  # imports and first-use caches, so they land in no figure
        for n in sizes:
            print(f"[bench] {n} hosts x {args.per_host} instances ...", file=sys.stderr, flush=True)
            rows.append(run_size(n, args.per_host, Path(tmp)))
    print(json.dumps({"per_host": args.per_host, "goal": {"hosts": GOAL_HOSTS, "plan_time_s": GOAL_S},
                      "rows": rows}, indent=2) if args.json else report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
