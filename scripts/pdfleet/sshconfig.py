"""A host's SSH settings as OpenSSH would resolve them for Ansible, for the day-2 commands that use paramiko (Fabric).

Ansible reaches a host with OpenSSH: ``ansible_ssh_common_args``/``ansible_ssh_extra_args`` (``-o Key=Value``,
``-J``, ``-F file``, ...) come first, then the ``-F`` file, else the user's and the system's ssh_config, and host
keys are checked against the known_hosts files those name. This module turns the same arguments into one
``paramiko.SSHConfig`` (first value wins, as in OpenSSH) so Fabric honours ProxyJump, ProxyCommand, Port, User and
IdentityFile, and lists the known_hosts files to check a host's key against. Options OpenSSH has but this cannot
carry over are refused with the option named, never dropped silently.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pdfleet.errors import PdfleetError

# Command-line flags with a value, as ssh_config keywords (ssh(1)).
FLAG_KEYWORDS = {"-J": "ProxyJump", "-i": "IdentityFile", "-p": "Port", "-l": "User"}
# Flags without a value that change nothing a command needs here (address family aside: paramiko resolves both),
# or that only make sense interactively.
HARMLESS_FLAGS = frozenset(("-4", "-6", "-C", "-q", "-T", "-t", "-v", "-vv", "-vvv", "-x", "-a", "-n"))
USER_CONFIG = "~/.ssh/config"
SYSTEM_CONFIG = "/etc/ssh/ssh_config"
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


class SshSettingsError(PdfleetError):
    """A host's SSH arguments cannot be honoured."""


@dataclass(frozen=True)
class SshSettings:
    """One host's resolved SSH configuration text (``-o`` options first, then the config files)."""

    host: str
    text: str

    def config(self):  # noqa: ANN201 - paramiko.SSHConfig (paramiko is imported late: it is slow to import)
        import paramiko

        return paramiko.SSHConfig.from_text(self.text)

    def known_hosts_files(self, address: str) -> list[str]:
        """The known_hosts files OpenSSH would check for ``address`` (UserKnownHostsFile, then
        GlobalKnownHostsFile; "none" and /dev/null name no file), expanded."""
        found = self.config().lookup(address)
        files: list[str] = []
        for key, default in (("userknownhostsfile", DEFAULT_USER_KNOWN_HOSTS),
                             ("globalknownhostsfile", DEFAULT_GLOBAL_KNOWN_HOSTS)):
            names = shlex.split(found[key]) if key in found else list(default)
            files += [os.path.expanduser(n) for n in names if n.lower() != "none" and n != os.devnull]
        return files


def _options(host: str, args: Sequence[str]) -> tuple[list[str], str | None]:
    """The ssh_config lines the command-line arguments stand for, and the ``-F`` file."""
    lines: list[str] = []
    config_file: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        flag, inline = (arg[:2], arg[2:]) if arg.startswith("-") and len(arg) > 2 and arg[:2] in (
            "-o", "-F", *FLAG_KEYWORDS) else (arg, "")
        if flag in ("-o", "-F", *FLAG_KEYWORDS):
            if inline:
                value = inline
            elif i + 1 < len(args):
                i += 1
                value = args[i]
            else:
                raise SshSettingsError(f"host {host}: the SSH argument {arg} has no value; fix "
                                       "ansible_ssh_common_args / ansible_ssh_extra_args")
            if flag == "-F":
                config_file = value
            elif flag == "-o":
                key, sep, val = value.partition("=")
                if not sep:
                    key, _, val = value.partition(" ")
                if not key.strip() or not val.strip():
                    raise SshSettingsError(f"host {host}: the SSH option -o {value!r} is not Key=Value; fix "
                                           "ansible_ssh_common_args / ansible_ssh_extra_args")
                lines.append(f"  {key.strip()} {val.strip()}")
            else:
                lines.append(f"  {FLAG_KEYWORDS[flag]} {value}")
        elif arg not in HARMLESS_FLAGS:
            raise SshSettingsError(
                f"host {host}: the SSH argument {arg!r} cannot be carried over to the day-2 commands' SSH "
                "(paramiko). Fix: express it as -o Key=Value or in an ssh_config given with -F, or remove it "
                "from ansible_ssh_common_args / ansible_ssh_extra_args")
        i += 1
    return lines, config_file


def _pattern(destination: str) -> str:
    """``destination`` as an ssh_config Host pattern matching it alone (its wildcard characters are refused)."""
    if any(c in destination for c in "*?!, \t\n"):
        raise SshSettingsError(f"the SSH destination {destination!r} holds a pattern character; fix ansible_host")
    return destination


def resolve(host: str, args: Sequence[str], address: str | None = None) -> SshSettings:
    """The SSH configuration OpenSSH would use for inventory host ``host``, reached at ``address`` (default: the
    name), given Ansible's SSH arguments: the ``-o``/flag options in a leading block for that destination only
    (they win there, and like OpenSSH's command line they do not apply to ProxyJump hops), then the ``-F`` file,
    else the user's and the system's ssh_config where they exist. A ``-F`` file that cannot be read is an error
    naming it."""
    lines, config_file = _options(host, args)
    parts = [f"Host {_pattern(address or host)}", *lines] if lines else []
    if config_file is not None:
        path = Path(os.path.expanduser(config_file))
        try:
            parts.append(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise SshSettingsError(f"host {host}: the ssh_config {path} (-F in ansible_ssh_common_args) cannot "
                                   f"be read: {exc.strerror}. Fix the path or create the file") from None
    else:
        for name in (USER_CONFIG, SYSTEM_CONFIG):
            path = Path(os.path.expanduser(name))
            if path.is_file():
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
    return SshSettings(host=host, text="\n".join(parts) + "\n")
