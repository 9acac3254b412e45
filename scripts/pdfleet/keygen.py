"""`pdfleet keygen NAME`: a new random key for one of the secrets the units read, for Vault.

The key goes to standard output only (no newline when piped), so it can go straight into ansible-vault without
ever being on a command line or in a file:

    pdfleet keygen PDFLEET_ROUTER_API_KEY | ansible-vault encrypt_string --stdin-name PDFLEET_ROUTER_API_KEY

On a terminal it refuses (a key shown on screen ends up in scrollback) and prints that pipeline instead.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from typing import TextIO

from pdfleet.planner import ROUTER_KEY_ENV

# Each secret the planner gives units, and what it protects.
NAMES = {ROUTER_KEY_ENV: "the gateway's API (router.api_key)"}
KEY_BYTES = 32


def new_key() -> str:
    """A URL-safe key with KEY_BYTES of randomness (no character systemd's EnvironmentFile would treat specially)."""
    return secrets.token_urlsafe(KEY_BYTES)


def pipeline(name: str) -> str:
    return f"pdfleet keygen {name} | ansible-vault encrypt_string --stdin-name {name}"


def cmd_keygen(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if out.isatty() and not args.show:
        print("pdfleet keygen: not printing a key to a terminal. Put it into Vault directly:\n"
              f"  {pipeline(args.name)}\n"
              "and paste the result under pdfleet_units_secrets in your inventory's group_vars "
              "(--show prints it here anyway)", file=sys.stderr)
        return 2
    out.write(new_key())
    if out.isatty():
        out.write("\n")
    out.flush()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keygen", help="a new random key for pdfleet_units_secrets (pipe it into ansible-vault)")
    p.add_argument("name", choices=sorted(NAMES), help="; ".join(f"{n}: {w}" for n, w in NAMES.items()))
    p.add_argument("--show", action="store_true", help="print the key even to a terminal")
    p.set_defaults(func=cmd_keygen)
