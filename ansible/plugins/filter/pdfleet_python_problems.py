"""Ansible filter `pdfleet_python_problems`: can this host's Python install the pinned SGLang stack?

    __sglang_python_problems: >-
      {{ __sglang_probe_run.probe.python | pdfleet_python_problems(inventory_hostname, sglang_version,
         sglang_install_mode, sglang_python_check_nixl) }}

The probe (the sglang role's files/probe.py) reports the Python version of the interpreter that makes (or made) the
service venv, the host's glibc and, in sim mode, the CPU runtime's Python. The decision, from the wheel facts kept
beside each pin (the manifest's `wheels:`, constants.yml `pin_wheels`), is pdfleet.patch.wheels'; the result is a
list with one message naming the host, its Python, the pin and the pins that would install (empty: it installs).
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

try:
    from pdfleet.errors import PdfleetError
    from pdfleet.patch.wheels import host_problems
except ImportError as exc:  # pragma: no cover - depends on how ansible-playbook was started
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def pdfleet_python_problems(look: Mapping[str, object], host: str, version: str, install_mode: str,
                            with_nixl: bool = False) -> list[str]:
    """The problems of `host` installing SGLang `version` in `install_mode` with the Python its probe reported."""
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            f"the pdfleet package is not importable ({_IMPORT_ERROR}); run ansible-playbook from the "
            "project's virtualenv (make site, or .venv/bin/ansible-playbook)"
        )
    try:
        return host_problems(str(host), {str(k): str(v) for k, v in dict(look or {}).items()}, str(version),
                             str(install_mode), with_nixl=bool(with_nixl))
    except PdfleetError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict:
        return {"pdfleet_python_problems": pdfleet_python_problems}
