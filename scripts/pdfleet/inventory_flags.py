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
    add_vault_arguments(g)


def add_vault_arguments(group: argparse._ActionsContainer, of: str = "") -> None:
    """-e, --vault-password-file and --vault-id alone, for a command whose -i is its own (``of``: "for -i")."""
    suffix = f" {of}" if of else ""
    if not any("--extra-vars" in a.option_strings for a in group._actions):
        group.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                           help=f"extra variables{suffix}: key=value, YAML/JSON, or @file (repeatable)")
    group.add_argument("--vault-password-file", action="append", default=[], metavar="FILE",
                       help=f"vault password file{suffix} (repeatable; ANSIBLE_VAULT_PASSWORD_FILE works too)")
    group.add_argument("--vault-id", action="append", default=[], metavar="ID",
                       help=f"vault identity{suffix} (repeatable)")


def source_from_args(args: argparse.Namespace) -> InventorySource:
    """The InventorySource the parsed inventory flags describe (default: the simulated cluster); -i is one path or
    a list of them."""
    given = args.inventory if isinstance(args.inventory, list) else [args.inventory] if args.inventory else []
    paths = tuple(given) or (DEFAULT_INVENTORY,)
    return InventorySource(paths, tuple(args.extra_vars), tuple(args.vault_password_file), tuple(args.vault_id))
