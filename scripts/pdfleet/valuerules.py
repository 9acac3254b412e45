"""The rules that keep an inventory value from turning into something else on a host.

The inventory is trusted input (as Ansible trusts it), but a stray value must never become a directive, a path
outside its place or a privilege: names that become file and unit names are plain words, directories are
absolute and none of the system's own, the service user is not root or a system account, environment names
are names (and never the dynamic loader's), host addresses are addresses, and a downloaded model's revision is a
commit. Each rule gives a Problem naming the field and the fix; the planner runs them with its other rules
(pdfleet.planner.check_rules).
Control characters and number ranges are refused while parsing (pdfleet.clusterspec).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from pdfleet.clusterspec import ClusterSpec, short, short_name
from pdfleet.errors import Problem
from pdfleet.versions import PINS, ROUTER_MODULES, ROUTER_RELEASES

# Host and instance names become directories (`pdfleet render -o DIR/<host>`) and unit names.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# useradd's portable names.
USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# An address or DNS name (IPv6 with its colons); nothing a unit file could read as more than one word.
ADDRESS = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:_-]{0,252}")
# What systemd's EnvironmentFile= parser reads as quoting in a value (the env files write values as they are).
ENV_QUOTING = re.compile(r"[\\\"']")
# The dynamic loader's variables run code in every process of the unit before SGLang does.
LOADER_ENV = re.compile(r"LD_\w*")
# A git commit as the hub names it (the model's revision, `source: hub`): 40 lowercase hex digits.
COMMIT = re.compile(r"[0-9a-f]{40}")
# Accounts a Debian or Ubuntu system has, and uid 0's name: never the service user.
SYSTEM_USERS = frozenset({"root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp",
                          "proxy", "www-data", "backup", "list", "irc", "gnats", "nobody", "sshd", "messagebus",
                          "_apt", "systemd-network", "systemd-resolve", "systemd-timesync", "polkitd", "syslog"})
# Directories of the system itself: a unit's directory there would be chowned to the service user.
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt", "/opt", "/proc",
    "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/usr/bin", "/usr/include", "/usr/lib",
    "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/sbin", "/usr/share", "/usr/src", "/usr/local/bin",
    "/usr/local/lib", "/usr/local/sbin", "/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/log",
    "/var/mail", "/var/opt", "/var/spool", "/var/tmp", "/etc/systemd", "/etc/ssh", "/etc/sudoers.d", "/etc/apt",
    "/etc/default", "/etc/security", "/etc/pam.d", "/run/systemd", "/lib/systemd", "/usr/lib/systemd",
})


def check_values(c: ClusterSpec, inventory_hosts: Mapping[str, str]) -> list[Problem]:
    """Every value rule, each violation one Problem."""
    out: list[Problem] = []
    for name, address in inventory_hosts.items():
        if not NAME.fullmatch(name):
            out.append(Problem(f"inventory host {short_name(name)}", "is not a plain host name (letters, digits, "
                               ". _ -; it names the host's directory and files)", "rename the host", host=name))
        if not ADDRESS.fullmatch(address):
            out.append(Problem(f"hostvars[{short_name(name)}].ansible_host", f"{short(address)} is not an address "
                               "or DNS name", "set ansible_host to the host's address", host=name))
    for i, inst in enumerate(c.instances):
        if not NAME.fullmatch(inst.name):
            out.append(Problem(f"pdfleet_cluster.instances[{i}].name", f"{short(inst.name)} is not a plain name "
                               "(letters, digits, . _ -; it names the unit)", "rename the instance", host=inst.host))
    for name in c.hosts:
        if not NAME.fullmatch(name):
            out.append(Problem(f"pdfleet_cluster.hosts.{short_name(name)}", "is not a plain host name",
                               "use the inventory's host name", host=name))
    svc = c.service
    for field, value in (("user", svc.user), ("group", svc.group)):
        path = f"pdfleet_cluster.service.{field}"
        if not USER.fullmatch(value):
            out.append(Problem(path, f"{short(value)} is not a valid {field} name", "use a name like pdfleet"))
        elif value in SYSTEM_USERS:
            out.append(Problem(path, f"{value!r} is a system account; the units would run with its rights (and "
                               "the role would change its shell to nologin)", "use a dedicated name like pdfleet"))
    for path, value in (("pdfleet_cluster.service.config_dir", svc.config_dir),
                        ("pdfleet_cluster.service.state_dir", svc.state_dir),
                        ("pdfleet_cluster.model.path", c.model.path),
                        ("pdfleet_cluster.sglang.venv", c.sglang.venv),
                        ("pdfleet_cluster.sglang.router_venv", c.sglang.router_venv)):
        problem = _directory_problem(value)
        if problem:
            out.append(Problem(path, problem, "use a directory of its own, e.g. the default"))
    env_values = [(f"pdfleet_cluster.nixl.extra_env.{short_name(k)}", v) for k, v in c.nixl.extra_env.items()]
    env_values += [("pdfleet_cluster.nixl.ucx_net_devices", c.nixl.ucx_net_devices),
                   ("pdfleet_cluster.nixl.backend", c.nixl.backend)]
    for path, value in env_values:
        if ENV_QUOTING.search(value):
            out.append(Problem(path, f"{short(value)} holds a quote or backslash: systemd's environment file reads "
                               "them as quoting (a trailing backslash joins the next line)", "remove them"))
    for key in c.nixl.extra_env:
        path = f"pdfleet_cluster.nixl.extra_env.{short_name(key)}"
        if not ENV_NAME.fullmatch(key):
            out.append(Problem(path, "is not an environment variable name", "use letters, digits and _"))
        elif LOADER_ENV.fullmatch(key):
            out.append(Problem(path, "is a dynamic loader variable: it would load code into every worker before "
                               "SGLang", "remove it (install libraries where the loader finds them)"))
    out += _revision_problems(c)
    out += _router_package_problems(c)
    return out


def _release_hint(package: str) -> str:
    """The release of ``package`` the bundle ships a lock for, as a hint ("0.3.2 has a lock"), or where locks go."""
    release = ROUTER_RELEASES.get(package)
    return f"{release} has a lock" if release else "each release needs its lock in the sglang role's files/gateway"


def _router_package_problems(c: ClusterSpec) -> list[Problem]:
    """The router package must be one the bundle deploys, with a version of its own (not the other package's pin),
    in a venv of its own."""
    sg = c.sglang
    if sg.router_package not in ROUTER_MODULES:
        return [Problem("pdfleet_cluster.sglang.router_package", f"{short(sg.router_package)} is not a router pdfleet "
                        "deploys", f"choose one of {', '.join(sorted(ROUTER_MODULES))} (default "
                        f"{PINS['sglang_router_package']})")]
    if sg.router_package != PINS["sglang_router_package"] and sg.router_version == PINS["sglang_router_version"]:
        return [Problem("pdfleet_cluster.sglang.router_version", f"{sg.router_version} is the pin of "
                        f"{PINS['sglang_router_package']}, not of {sg.router_package}",
                        f"set router_version to the {sg.router_package} release to deploy "
                        f"({_release_hint(sg.router_package)})")]
    if sg.router_venv.rstrip("/") == sg.venv.rstrip("/"):
        return [Problem("pdfleet_cluster.sglang.router_venv", f"{sg.router_venv} is the service venv",
                        "give the router a venv of its own (default /opt/pdfleet/gateway)")]
    return []


def _revision_problems(c: ClusterSpec) -> list[Problem]:
    """A hub model pinned by a moving name: a branch or tag (the default "main") can bring other weights, and other
    code that the workers run with --trust-remote-code, at every download; only a commit is the revision someone
    validated. Mirror and stand-in sources download nothing."""
    m = c.model
    if m.source != "hub" or m.allow_branch_revision or COMMIT.fullmatch(m.revision):
        return []
    default = " (the default)" if m.revision == "main" else ""
    return [Problem("pdfleet_cluster.model.revision",
                    f"{short(m.revision)}{default} is not a commit hash: a branch or tag of {short_name(m.name, 80)} "
                    "moves, so a later download can bring other weights and other model code (run with "
                    "--trust-remote-code)",
                    "set it to the 40-hex commit you validated (lowercase, as the hub's history of the model lists "
                    "it), or set pdfleet_cluster.model.allow_branch_revision: true to accept a moving name "
                    "explicitly")]


def _directory_problem(value: str) -> str:
    """What is wrong with a host directory of the units (relative ones are the planner's _check_absolute)."""
    if not posixpath.isabs(value):
        return ""
    norm = posixpath.normpath(value)
    if value not in (norm, f"{norm}/") or "//" in value:
        return f"{short(value)} is not a normalised path (no '..', '.' or '//')"
    if norm in SYSTEM_DIRS:
        return f"{norm} is a system directory: the role would chown it to the service user"
    if posixpath.dirname(norm) in {"/home", "/root"}:
        return f"{norm} is a home directory"
    return ""
