"""The inventory flags every ``pdfleet`` command takes (as ansible-playbook's), and the InventorySource they name."""

from __future__ import annotations

import argparse
from pathlib import Path

from pdfleet.inventory import InventorySource
from pdfleet.paths import DEFAULT_INVENTORY


def add_inventory_arguments(parser: argparse.ArgumentParser, default_help: str = "") -> None:
    """The inventory flags of every `pdfleet` command: the same as ansible-playbook's."""
    g = parser.add_argument_group("inventory (as for ansible-playbook)")
    g.add_argument("-i", "--inventory", type=Path, action="append", default=None,
                   help=default_help or f"inventory directory or file, repeatable (default: {DEFAULT_INVENTORY.name})")
    g.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                   help="extra variables: key=value, YAML/JSON, or @file (repeatable)")
    g.add_argument("--vault-password-file", action="append", default=[], metavar="FILE",
                   help="vault password file (repeatable; ANSIBLE_VAULT_PASSWORD_FILE works too)")
    g.add_argument("--vault-id", action="append", default=[], metavar="ID", help="vault identity (repeatable)")


def source_from_args(args: argparse.Namespace) -> InventorySource:
    """The InventorySource the parsed inventory flags describe (default: the simulated cluster)."""
    paths = tuple(args.inventory or ()) or (DEFAULT_INVENTORY,)
    return InventorySource(paths, tuple(args.extra_vars), tuple(args.vault_password_file), tuple(args.vault_id))
