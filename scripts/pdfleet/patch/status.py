"""`pdfleet patch status -i INVENTORY`: what each worker host's sglang role recorded, against the plan.

The record (`<venv>/pdfleet-record.json`, written by the sglang role) says which SGLang version and patch
are installed and the conn.py hash; this command reads it from every worker host over SSH, re-hashes the
file, and compares both with the plan and the patch manifest. Exit 0 all match, 1 a host differs, 2 a host
could not be read.
"""

from __future__ import annotations

import argparse
import json

from pdfleet import versions
from pdfleet.inventory import load_inventory
from pdfleet.inventory_flags import add_inventory_arguments, source_from_args
from pdfleet.inventory_plan import plan_of
from pdfleet.patch import manifest as patches
from pdfleet.patch.cli import patch_subcommands
from pdfleet.remote import RemoteError, connection_for, run
from pdfleet.table import format_table

RECORD_NAME = versions.RECORD_NAME  # constants.yml, shared with the sglang role


def register(subparsers: argparse._SubParsersAction) -> None:
    p = patch_subcommands(subparsers).add_parser("status", help="each worker host's installed SGLang and patch")
    add_inventory_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_status)


def host_status(record: dict, found_sha: str, want_version: str, want_patched: bool) -> list[str]:
    """The differences between one host's record, its file and the plan; empty when all agree."""
    manifest = patches.load_manifest(want_version)
    want_sha = manifest.patched_sha256 if want_patched else manifest.pristine_sha256
    problems = []
    if record.get("version") != want_version:
        problems.append(f"version {record.get('version')} != planned {want_version}")
    if bool(record.get("patched")) != want_patched:
        problems.append(f"patched={record.get('patched')} but the plan says apply_patch={want_patched}")
    if found_sha != want_sha:
        problems.append(f"conn.py sha256 {found_sha[:12]}… != expected {want_sha[:12]}…")
    elif record.get("sha256") != found_sha:
        problems.append("the record's hash does not match the file")
    return problems


def cmd_status(args: argparse.Namespace) -> int:
    inventory = load_inventory(source_from_args(args))
    plan = plan_of(inventory)
    version, patched = str(plan.sglang["version"]), bool(plan.sglang["apply_patch"])
    rows, out, worst = [], [], 0
    for host, units in plan.hosts.items():
        if not any(u.kind == "worker" for u in units):
            continue
        record_path = f"{plan.sglang['venv']}/{RECORD_NAME}"
        try:
            rc, stdout, err = run(connection_for(inventory, host), f"cat {record_path}")
            if rc != 0:
                raise RemoteError(f"host {host}: cannot read {record_path} ({err.strip()}); run site.yml first")
            record = json.loads(stdout)
            rc, stdout, err = run(connection_for(inventory, host), f"sha256sum {record['file']}")
            found = stdout.split()[0] if rc == 0 else "(missing file)"
            problems = host_status(record, found, version, patched)
        except (RemoteError, ValueError, KeyError) as exc:
            rows.append([host, "?", "?", "?", f"UNREADABLE: {exc}"])
            out.append({"host": host, "ok": False, "error": str(exc)})
            worst = 2
            continue
        worst = max(worst, 1 if problems else 0)
        rows.append([host, record.get("version"), record.get("patch_id") or "(none)", found[:12],
                     "; ".join(problems) or "ok"])
        out.append({"host": host, "ok": not problems, "record": record, "sha256": found, "problems": problems})
    if args.json:
        print(json.dumps({"ok": worst == 0, "hosts": out}, indent=2))
    else:
        print(format_table(["host", "version", "patch", "conn.py sha256", "status"], rows))
    return worst
