"""Inventories read by ansible-core itself, so every `pdfleet` command sees what `ansible-playbook` sees.

`host_vars/`, the variables of any group, several `-i` sources, extra vars (`-e`, same syntax as Ansible's) and
Vault-encrypted files (`--vault-password-file`, `--vault-id`, `ANSIBLE_VAULT_PASSWORD_FILE`) all behave as in a
playbook run, because the same InventoryManager, VariableManager and Templar do the work. Only inventory-level
variables exist here (no facts, no play vars): that is what the planner and the connection settings need.

`connection_from_vars` is the one reading of Ansible's connection variables (address, port, user, key, SSH
options): `Inventory.connection(host)` for `pdfleet.remote`, the journal reader and conformance, and the
pdfleet_connections filter for plays (hostvars, Vault already opened).

This module's one job is loading: the command-line flags that name an inventory are `pdfleet.inventory_flags`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdfleet.clusterspec import MAX_VALUES, count_values
from pdfleet.errors import InventoryError
from pdfleet.paths import DEFAULT_INVENTORY

ROOT_VARIABLE = "pdfleet_cluster"


@dataclass(frozen=True)
class InventorySource:
    """What a user passes to `pdfleet` (and would pass to ansible-playbook): inventories, extra vars, vault."""

    paths: tuple[Path, ...] = (DEFAULT_INVENTORY,)
    extra_vars: tuple[str, ...] = ()
    vault_password_files: tuple[str, ...] = ()
    vault_ids: tuple[str, ...] = ()

    @classmethod
    def of(cls, value: InventorySource | str | Path | Sequence[str | Path]) -> InventorySource:
        if isinstance(value, InventorySource):
            return value
        if isinstance(value, str | Path):
            return cls((Path(value),))
        return cls(tuple(Path(v) for v in value))

    @property
    def path(self) -> Path:
        """The first source: where error messages and defaults (reports, sim state) point."""
        return self.paths[0]

    def describe(self) -> str:
        return ", ".join(str(p) for p in self.paths)

    def ansible_args(self) -> list[str]:
        """The same inventory for an ansible(-playbook) command line."""
        args: list[str] = []
        for p in self.paths:
            args += ["-i", str(p)]
        for e in self.extra_vars:
            args += ["-e", e]
        for f in self.vault_password_files:
            args += ["--vault-password-file", f]
        for v in self.vault_ids:
            args += ["--vault-id", v]
        return args


@dataclass(frozen=True)
class HostConnection:
    """How to reach one inventory host over SSH, as Ansible's ssh connection would."""

    name: str
    address: str
    port: int | None = None
    user: str | None = None
    key_file: str | None = None
    ssh_args: tuple[str, ...] = ()  # ansible_ssh_common_args + ansible_ssh_extra_args, split

    @property
    def ssh_config(self) -> str | None:
        """The `-F FILE` among the SSH arguments (fabric and testinfra take it separately)."""
        args = list(self.ssh_args)
        return args[args.index("-F") + 1] if "-F" in args[:-1] else None

    def testinfra_url(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"ssh://{user}{self.address}{port}"


_MISSING = object()


def _template_strings(value: object) -> list[str]:
    """The strings in `value` (keys too) that may hold a template: the only parts that can template differently
    from one host to another."""
    from ansible.template import Templar

    is_possibly_template = Templar().is_possibly_template
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, str) and is_possibly_template(item):
            out.append(item)
    return out


class _TooLarge(Exception):
    """A variable holding more values than any model needs (a YAML alias bomb): stop walking it."""


def _plain(value: object, budget: list[int] | None = None) -> object:
    """Ansible's tagged types (and its vault/lazy containers) as plain Python data; at most MAX_VALUES values
    (each element of Ansible's lazy containers is templated when read: an alias bomb would take minutes)."""
    budget = [MAX_VALUES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge
    if isinstance(value, Mapping):
        return {str(k): _plain(v, budget) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, budget) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


@contextmanager
def _captured_ansible_warnings() -> Iterator[list[str]]:
    """Collect what ansible-core would print as warnings/errors while parsing, instead of printing it."""
    from ansible.utils.display import Display

    display = Display()
    seen: list[str] = []
    saved = {name: getattr(display, name) for name in ("warning", "error_as_warning", "error")}

    def warning(msg: str, *args: Any, **kwargs: Any) -> None:
        seen.append(str(msg))

    def error_as_warning(msg: str | None, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        seen.append(f"{msg or ''} {exception}".strip())

    display.warning = warning  # type: ignore[method-assign]
    display.error_as_warning = error_as_warning  # type: ignore[method-assign]
    display.error = warning  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        for name, fn in saved.items():
            setattr(display, name, fn)


def _one_line(text: str) -> str:
    text = re.sub(r"<class 'ansible\.[\w.]*\._AnsibleTagged(\w+)'>", lambda m: m.group(1).lower(), text)
    return " ".join(text.split())


def _parse_failure(problems: list[str]) -> str:
    """Why ansible-core could not read a source: the YAML plugin's reason when it tried (our inventories are
    YAML), else every plugin's."""
    relevant = [m for m in problems if "Unable to parse" not in m and "only implicit localhost" not in m]
    yaml_only = [m for m in relevant if "'yaml' plugin" in m]
    return "; ".join(_one_line(m) for m in (yaml_only or relevant))


class Inventory:
    """An inventory as ansible-core loaded it: hosts, their variables, and how to reach them."""

    def __init__(self, source: InventorySource) -> None:
        self.source = source
        self.path = source.path
        self._load()

    def _load(self) -> None:
        from ansible.errors import AnsibleError
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.utils.collection_loader import AnsibleCollectionConfig
        from ansible.vars.manager import VariableManager

        if AnsibleCollectionConfig.collection_finder is None:  # what ansible's own CLIs do first: without it no
            from ansible.plugins.loader import init_plugin_loader  # plugin by FQCN (a lookup in a variable) loads

            init_plugin_loader()
        for p in self.source.paths:
            if not p.exists():
                raise InventoryError(f"{p}: inventory not found (pass -i with an inventory directory or file)")
        self._loader = DataLoader()
        try:
            self._setup_vault()
            with _captured_ansible_warnings() as problems:
                self._manager = InventoryManager(loader=self._loader, sources=[str(p) for p in self.source.paths])
            parsed = [Path(p).resolve() for p in self._manager._inventory.processed_sources if p]
            for p in self.source.paths:
                if not any(q == p.resolve() or p.resolve() in q.parents for q in parsed):
                    why = _parse_failure(problems)
                    raise InventoryError(f"{p}: not a usable inventory ({why or 'no inventory plugin read it'}); "
                                         f"check it with: ansible-inventory -i {p} --list")
            self._variables = VariableManager(loader=self._loader, inventory=self._manager)
            self._variables._extra_vars = self._extra_vars()  # the one extra-vars hook ansible-core has
        except AnsibleError as exc:
            raise InventoryError(f"{self.source.describe()}: {_one_line(str(exc))}") from None
        except UnicodeDecodeError as exc:
            raise InventoryError(f"{self.source.describe()}: a file is not UTF-8 ({exc.reason}); "
                                 "save it as UTF-8") from None
        self.host_names: list[str] = [h.name for h in self._manager.get_hosts("all")]
        self._raw: dict[str, dict[str, Any]] = {}
        self._templated: dict[tuple[str, str], object] = {}

    def _setup_vault(self) -> None:
        from ansible.cli import CLI
        from ansible.parsing.vault import VaultSecretsContext

        secrets = CLI.setup_vault_secrets(self._loader, vault_ids=list(self.source.vault_ids),
                                          vault_password_files=list(self.source.vault_password_files),
                                          ask_vault_pass=False, auto_prompt=False, initialize_context=False)
        self._loader.set_vault_secrets(secrets)
        # A value encrypted inline (`ansible-vault encrypt_string`, as the README makes the gateway key) is
        # decrypted when it is templated, with the secrets of ansible-core's process-wide context (ansible-core
        # >= 2.19), which can be initialized only once: the first inventory with Vault secrets sets it up, a later
        # one adds its own.
        context = VaultSecretsContext.current(optional=True)
        if context is None:
            VaultSecretsContext.initialize(VaultSecretsContext(list(secrets)))
        else:
            context.secrets.extend(s for s in secrets if s not in context.secrets)

    def _extra_vars(self) -> dict[str, Any]:
        """`-e` values, parsed like ansible-playbook does: @file, YAML/JSON, or key=value pairs."""
        from ansible.parsing.splitter import parse_kv
        from ansible.utils.vars import combine_vars

        out: dict[str, Any] = {}
        for text in self.source.extra_vars:
            if not text:
                continue
            if text.startswith("@"):
                data = self._loader.load_from_file(text[1:])
            elif text[0] in "[{":
                data = self._loader.load(text)
            else:
                data = parse_kv(text)
            if not isinstance(data, Mapping):
                raise InventoryError(f"-e {text!r}: extra vars must be a mapping (key=value, a YAML/JSON object or "
                                     "@file)")
            out = combine_vars(out, data)
        return out

    # ----- variables ----------------------------------------------------------------------------
    def raw_vars(self, host: str) -> dict[str, Any]:
        """Every inventory variable of `host` (all groups, host_vars, extra vars), untemplated."""
        if host not in self._raw:
            h = self._manager.get_host(host)
            if h is None:
                raise InventoryError(f"{self.source.describe()}: no host {host!r} (hosts: "
                                     f"{', '.join(self.host_names) or '(none)'})")
            from ansible.errors import AnsibleError

            try:
                self._raw[host] = self._variables.get_vars(host=h, include_hostvars=False)
            except AnsibleError as exc:
                text = _one_line(str(exc))
                raise InventoryError(f"{self.source.describe()}: host {host}: cannot read its variables: "
                                     f"{text}{_vault_fix(text)}") from None
        return self._raw[host]

    def var(self, host: str, name: str, default: object = None) -> object:
        """One variable of `host`, templated the way a play would see it, as plain Python data."""
        key = (host, name)
        if key not in self._templated:
            raw = self.raw_vars(host)
            if name not in raw:
                return default
            self._check_size(host, name, raw[name])
            self._templated[key] = self._template(host, name, raw[name])
        return self._templated[key]

    def _check_size(self, host: str, name: str, value: object) -> None:
        if count_values(value) > MAX_VALUES:  # before templating, which walks all of it
            raise InventoryError(f"{self.source.describe()}: host {host}: {name} holds more than {MAX_VALUES} "
                                 "values (a YAML alias that expands again and again?); write it out plainly")

    def _template(self, host: str, name: str, data: object) -> object:
        """`data` templated with `host`'s variables, as plain Python data (`name` is for the messages)."""
        from ansible.errors import AnsibleError
        from ansible.template import Templar

        try:
            value = Templar(loader=self._loader, variables=self.raw_vars(host)).template(data)
        except AnsibleError as exc:
            text = _one_line(str(exc))
            raise InventoryError(f"{self.source.describe()}: host {host}: cannot template {name}: "
                                 f"{text}{_vault_fix(text)}") from None
        try:
            return _plain(value)
        except _TooLarge:
            raise InventoryError(f"{self.source.describe()}: host {host}: {name} holds more than {MAX_VALUES} "
                                 "values (a YAML alias that expands again and again?); write it out plainly"
                                 ) from None

    @property
    def hosts(self) -> dict[str, str]:
        """Host name -> address (`ansible_host`, else the name), in inventory order."""
        return {h: str(self.var(h, "ansible_host") or h) for h in self.host_names}

    def shared_var(self, name: str) -> object:
        """A variable every host must agree on (the cluster model, the sim settings); None when no host has it.

        A play plans per host; if hosts saw different values they would plan different clusters, so that is
        refused, naming a host that differs.

        Linear in hosts and model size: hosts that get the variable from the same place (group_vars/all: one
        object for every host) share one templating of it. Where it holds templates, only those strings are
        templated per host, and the whole value once per distinct outcome (a model that templates alike on every
        host is templated once; one that differs is refused as before).
        """
        values = self._shared_values(name)
        defined = {h: v for h, v in values.items() if v is not None}
        if not defined:
            return None
        first_host, first = next(iter(defined.items()))
        for h, v in values.items():
            if v is not first and v != first:
                raise InventoryError(f"{self.source.describe()}: {name} differs between hosts {first_host} and {h}; "
                                     f"define it once for the whole inventory (group_vars/all)")
        return first

    def _shared_values(self, name: str) -> dict[str, object]:
        """Every host's templated `name` (None where undefined), templating each distinct value once."""
        sources: dict[int, list[str]] = {}  # id of the untemplated value -> the hosts that have that very object
        raws: dict[int, object] = {}
        for h in self.host_names:
            raw = self.raw_vars(h)
            if name in raw and (h, name) not in self._templated:
                sources.setdefault(id(raw[name]), []).append(h)
                raws[id(raw[name])] = raw[name]
        for key, hosts in sources.items():
            self._check_size(hosts[0], name, raws[key])
            strings = _template_strings(raws[key])
            done: list[tuple[object, object]] = []  # (the strings templated, the whole value templated)
            for h in hosts:
                outcome = self._template(h, name, strings) if strings else None
                value = next((v for o, v in done if o == outcome), _MISSING)
                if value is _MISSING:
                    value = self._template(h, name, raws[key])
                    done.append((outcome, value))
                self._templated[(h, name)] = value
        return {h: self.var(h, name) for h in self.host_names}

    @property
    def variables(self) -> dict[str, object]:
        """The inventory-wide variables pdfleet reads (`pdfleet_cluster`, `pdfleet_sim`), where defined."""
        out: dict[str, object] = {}
        for name in (ROOT_VARIABLE, "pdfleet_sim"):
            value = self.shared_var(name)
            if value is not None:
                out[name] = value
        return out

    # ----- connection ---------------------------------------------------------------------------
    def connection(self, host: str) -> HostConnection:
        """How to reach `host`: Ansible's connection variables, with ansible.cfg's defaults."""
        try:
            return connection_from_vars(host, self.hosts[host], lambda name: self.var(host, name))
        except ValueError as e:
            raise InventoryError(f"{self.source.describe()}: {e}") from None


def connection_from_vars(host: str, address: str, var: Callable[[str], object]) -> HostConnection:
    """How Ansible's ssh connection reaches `host` (at ``address``, its ansible_host) from its variables (``var``:
    name -> value, templated) and ansible.cfg's defaults: the one reading of Ansible's connection variables, for
    the inventory (`Inventory.connection`) and for plays (the pdfleet_connections filter: hostvars, Vault opened).
    ValueError for a port that is not a number."""
    from ansible import constants as C

    def get(name: str) -> str | None:
        value = var(name)
        return None if value in (None, "") else str(value)

    port = get("ansible_port") or get("ansible_ssh_port")
    try:
        port_number = int(port) if port else None
    except ValueError:
        raise ValueError(f"host {host}: ansible_port {port!r} is not a number") from None
    user = get("ansible_user") or get("ansible_ssh_user") or (C.DEFAULT_REMOTE_USER or None)
    key = get("ansible_ssh_private_key_file") or get("ansible_private_key_file") or (C.DEFAULT_PRIVATE_KEY_FILE
                                                                                      or None)
    args: list[str] = []
    for name in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        text = get(name)
        if text:
            args += shlex.split(text)
    return HostConnection(name=host, address=address, port=port_number, user=user,
                          key_file=str(key) if key else None, ssh_args=tuple(args))


def _vault_fix(text: str) -> str:
    """The fix for an error about Vault (a vaulted value read without its password), else ""."""
    if "vault" not in text.lower():
        return ""
    return (" (pass --vault-password-file FILE or --vault-id, or set ANSIBLE_VAULT_PASSWORD_FILE, as for "
            "ansible-playbook)")


def load_inventory(source: InventorySource | str | Path | Sequence[str | Path]) -> Inventory:
    """Load an inventory with ansible-core; raise InventoryError naming the file on any problem."""
    return Inventory(InventorySource.of(source))


def connections(source: InventorySource | str | Path | Sequence[str | Path],
                hosts: Sequence[str]) -> dict[str, HostConnection]:
    """How to reach each of ``hosts`` (``Inventory.connection``)."""
    inv = load_inventory(source)
    return {h: inv.connection(h) for h in hosts}
