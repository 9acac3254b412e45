"""``python -m pdfleet.watchdog run|status …``: the watchdog alone (what pdfleet-watchdog.service runs), without
the rest of the ``pdfleet`` command's imports."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pdfleet.errors import PdfleetError
from pdfleet.watchdog import cli


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pdfleet")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["watchdog", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args))
    except PdfleetError as exc:
        print(f"pdfleet watchdog: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
