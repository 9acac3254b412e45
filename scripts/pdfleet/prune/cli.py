"""``python -m pdfleet.prune drain``: read the units role's drain request from standard input, print the report."""

from __future__ import annotations

import argparse
import json
import sys

from pdfleet.prune.drain import drain_stale
from pdfleet.routerkey import router_key


def main(argv: list[str] | None = None) -> int:
    """``python -m pdfleet.prune drain < request.json``: the units role's drain step.

    The request: ``{"router": URL, "timeout_s": S, "workers": [{"url": .., "role": ..}], "keep": [URL, ..]}``
    (the stale workers of one host, and the URLs the plan still gives that host), and ``"api_key"`` when the
    router has one (else ``$PDFLEET_ROUTER_API_KEY``; standard input, never the command line). Prints the JSON
    report (without the key).
    Exit 0 when it ran, 2 for a bad request.
    """
    p = argparse.ArgumentParser(prog="python -m pdfleet.prune")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("drain", help="take stale workers out of the router and wait until they are idle (JSON on stdin)")
    p.parse_args(argv)
    try:
        req = json.loads(sys.stdin.read())
        workers = [(str(w["url"]), str(w["role"])) for w in req.get("workers", [])]
        router, keep, timeout_s = str(req.get("router", "")), [str(u) for u in req.get("keep", [])], \
            float(req.get("timeout_s", 120))
        api_key = str(req.get("api_key") or "") or router_key()
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        print(f"pdfleet.prune drain: bad request on stdin ({e}); expected "
              '{"router": URL, "timeout_s": S, "workers": [{"url": URL, "role": ROLE}], "keep": [URL]}',
              file=sys.stderr)
        return 2
    print(json.dumps(drain_stale(router, workers, keep, timeout_s, api_key)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
