"""Vault works everywhere -i does (issue 30): every `pdfleet` command that reads an inventory with -i also takes
--vault-password-file, --vault-id and -e, as ansible-playbook does (an operator whose secrets are vaulted must be
able to run each of them)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from pdfleet.cli import build_parser

FLAGS = ("--vault-password-file", "--vault-id", "--extra-vars")


Command = tuple[str, argparse.ArgumentParser]


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Command]:
    """Every (sub)command's parser, by its words (`pdfleet rollout status`)."""
    yield " ".join(("pdfleet", *path)), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def test_every_command_that_takes_an_inventory_takes_the_vault_flags() -> None:
    found = {}
    for words, parser in commands(build_parser()):
        options = {o for a in parser._actions for o in a.option_strings}
        if "--inventory" in options:
            found[words] = [f for f in FLAGS if f not in options]
    assert len(found) >= 8, sorted(found)  # plan, render, verify, ops *, rollout plan/status, watchdog run, ...
    assert {"pdfleet rollout status", "pdfleet rollout plan", "pdfleet watchdog run",
            "pdfleet ops restart"} <= set(found), sorted(found)
    missing = {words: flags for words, flags in found.items() if flags}
    assert not missing, f"commands that take -i but not these flags: {missing}"
