"""Action plugin pdfleet.cluster.pdfleet_probe: one read-only probe of a host in one round trip.

A role's ``files/probe.py`` runs with the host's Ansible Python; its settings (JSON) go on its standard input
and it prints one JSON document, returned as ``probe``. No module wrapper is built or copied: a converged host
costs one remote command per probe (a ``command`` task costs about four times as much on a no-op run). The probe
changes nothing, so it runs in check mode too.

What every probe needs (file state, installed packages, a wheel's RECORD) is written once, in
the collection's ``plugins/module_utils/pdfleet_probe_common.py`` (code that runs on the managed host, as a
module's shared code does); the remote program registers it as the module ``pdfleet_probe_common`` and then runs
the role's script as ``__main__``. It is read from beside this file, in the same collection.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text

from ansible.plugins.action import ActionBase

ARGS = frozenset(("src", "settings", "python"))
COMMON = Path(__file__).resolve().parents[1] / "module_utils" / "pdfleet_probe_common.py"
COMMON_MODULE = "pdfleet_probe_common"


def remote_program(source: str, name: str, common: str | None = None) -> str:
    """The Python program sent to the host: the shared helpers as a module, then the probe as __main__."""
    if common is None:
        common = COMMON.read_text(encoding="utf-8")
    return ("import sys, types\n"
            f"m = types.ModuleType({COMMON_MODULE!r})\n"
            "sys.modules[m.__name__] = m\n"
            f"exec(compile({common!r}, {COMMON.name!r}, 'exec'), m.__dict__)\n"
            f"exec(compile({source!r}, {name!r}, 'exec'), {{'__name__': '__main__'}})\n")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        unknown = sorted(set(args) - ARGS)
        if unknown:
            raise AnsibleActionFail(f"pdfleet_probe: unknown argument(s) {', '.join(unknown)}; "
                                    f"use {', '.join(sorted(ARGS))}")
        src = args.get("src")
        if not isinstance(src, str) or not src:
            raise AnsibleActionFail("pdfleet_probe: src (the probe script under the role's files/) is required")
        path = self._find_needle("files", src)
        with open(path, encoding="utf-8") as f:
            source = f.read()
        python = self._python(args.get("python"), task_vars or {})
        settings = json.dumps(args.get("settings") or {}, sort_keys=True)
        host = (task_vars or {}).get("inventory_hostname", "?")
        cmd = f"{shlex.quote(python)} -c {shlex.quote(remote_program(source, src))}"
        res = self._low_level_execute_command(cmd, in_data=to_bytes(settings + "\n"))
        stdout, stderr = to_text(res.get("stdout", "")), to_text(res.get("stderr", ""))
        result["changed"] = False
        if res.get("rc") != 0:
            tail = (stderr.strip() or stdout.strip())[-800:]
            result.update(failed=True, rc=res.get("rc"), stderr=stderr,
                          msg=f"{src} on {host} exited {res.get('rc')}: {tail}")
            return result
        try:
            result["probe"] = json.loads(stdout)
        except ValueError as e:
            result.update(failed=True, stdout=stdout, stderr=stderr,
                          msg=f"{src} on {host} printed no JSON document ({e}): {stdout.strip()[-300:]}")
        return result

    def _python(self, given: Any, task_vars: dict[str, Any]) -> str:
        """The probe's interpreter: ``python``, else the host's Ansible interpreter (set or already
        discovered), else ``python3`` from the host's PATH."""
        for value in (given, task_vars.get("ansible_python_interpreter"),
                      task_vars.get("ansible_facts", {}).get("discovered_interpreter_python")):
            if value and not str(value).startswith("auto"):  # auto, auto_silent, ...: not a path
                return str(self._templar.template(value))
        return "python3"
