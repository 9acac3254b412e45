"""``python -m pdfleet.launchcheck [--write]``: check every example inventory at every pin; --write refreshes
the committed effective settings (resolved.json) that ``pdfleet plan`` shows."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pdfleet.errors import PdfleetError
from pdfleet.launchcheck import check, store


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdfleet.launchcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {store.RESOLVED_FILE.name}")
    args = parser.parse_args(argv)
    try:
        report = check.check_inventories(check.EXAMPLE_INVENTORIES)
    except PdfleetError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    for problem in report.problems:
        print(problem, file=sys.stderr)
    if report.problems:
        return 1
    if args.write:
        store.write(report.entries())
        print(f"wrote {len(report.entries())} units' settings to {store.RESOLVED_FILE}")
    else:
        print(f"{len(report.results)} launch lines accepted by their pinned SGLang and router")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
