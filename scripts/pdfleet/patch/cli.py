"""`pdfleet patch …`: check the SGLang NIXL patch of a version against SGLang's real code.

``pdfleet patch check --sglang-version V`` downloads the sglang==V wheel if it is not cached, applies
the patch to a scratch copy of its ``nixl/conn.py`` (hashes verified), builds or reuses the CPU runtime
(``pdfleet.patch.runtime``), runs the wedge cases (``pdfleet.patch.wedge``) on the pristine and the patched file and
prints one row per case. Exit codes: 0 every case behaved as expected (pristine wedges where the
version is known to, patched always serves), 1 a case did not, 2 could not run (unsupported version,
build failure).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from pdfleet.patch import manifest as patches
from pdfleet.patch import runtime, wedge
from pdfleet.patch.apply import apply_to_copy, extract_from_wheel
from pdfleet.table import format_table


def patch_subcommands(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The ``patch`` command's own subparsers (created on first call), for adding ``patch status``."""
    existing = subparsers.choices.get("patch")
    if existing is not None:
        return existing.pdfleet_subcommands  # type: ignore[attr-defined]
    parser = subparsers.add_parser("patch", help="the SGLang NIXL patch series: check it on SGLang's code")
    nested = parser.add_subparsers(dest="patch_command", required=True)
    parser.pdfleet_subcommands = nested  # type: ignore[attr-defined]
    return nested


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``patch check`` to the ``pdfleet`` CLI; its handler is ``args.func(args) -> exit code``."""
    nested = patch_subcommands(subparsers)
    p = nested.add_parser(
        "check", help="apply the patch of an SGLang version and run the wedge cases, pristine and patched"
    )
    p.add_argument("--sglang-version", required=True, metavar="V",
                   help=f"SGLang version (supported: {', '.join(patches.supported_versions())})")
    p.add_argument("--runtime-dir", type=Path, default=None,
                   help="where the heavy CPU runtime lives (default: .cache/runtime or $PDFLEET_RUNTIME_DIR)")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    version: str = args.sglang_version
    manifest = patches.load_manifest(version)  # UnsupportedVersionError lists the supported ones
    rt = runtime.ensure_runtime([version], args.runtime_dir)
    wheel = runtime.sglang_wheel(version)
    results: list[wedge.CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="pdfleet-patch-check-") as tmp:
        pristine = extract_from_wheel(wheel, manifest.file, Path(tmp) / "pristine" / "conn.py")
        patched = Path(tmp) / "patched" / "conn.py"
        apply_to_copy(version, pristine, patched)
        print(f"[pdfleet patch] {manifest.patch_id} applies to {manifest.file} of {wheel.name}; "
              "running the wedge cases", file=sys.stderr)
        for conn_file, is_patched in ((pristine, False), (patched, True)):
            results += wedge.run_cases(version, is_patched, runtime_root=rt.root, conn_file=conn_file)
    verdicts = [(r, wedge.evaluate(r)) for r in results]
    ok = all(not problems for _, problems in verdicts)
    if args.json:
        print(json.dumps({
            "ok": ok, "version": version, "patch_id": manifest.patch_id, "parts": list(manifest.parts),
            "cases": [{**asdict(r), "as_expected": not p, "problems": p} for r, p in verdicts],
        }, indent=2))
    else:
        print(_table(verdicts))
        print(f"\n{'PASS' if ok else 'FAIL'}: SGLang {version}, patch {manifest.patch_id} "
              f"(parts {', '.join(map(str, manifest.parts))})")
    return 0 if ok else 1


def _table(verdicts: list[tuple[wedge.CaseResult, list[str]]]) -> str:
    rows = []
    for r, problems in verdicts:
        want = True if r.variant == "patched" else wedge.EXPECTED_ALIVE[r.version][r.case]
        rows.append([
            r.variant, r.case, "alive" if r.thread_alive else "DEAD", "alive" if want else "dead",
            f"{r.probe_state} -> {r.probe_final}", len(r.warnings), len(r.errors),
            "ok" if not problems else "UNEXPECTED: " + "; ".join(problems),
        ])
    return format_table(
        ["conn.py", "case", "bootstrap thread", "expected", "probe room", "warnings", "errors", "verdict"],
        rows,
    )
