"""What pdfleet's controller-side modules share: they run on the control machine (delegate_to: localhost) and
import the pdfleet package, so each one starts the same way.

    with PdfleetImports() as IMPORTS:
        from pdfleet import fleet
    ...
    module = controller_module({**ROUTER_ARGS, "plan": {"type": "dict", "required": True}}, IMPORTS)
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# The router every fleet module talks to, and its API key (never logged).
ROUTER_ARGS: dict[str, dict[str, Any]] = {
    "router_url": {"type": "str", "required": True},
    "api_key": {"type": "str", "no_log": True},
}


class PdfleetImports:
    """A block of pdfleet imports: an ImportError is kept (for controller_module to report), not raised."""

    def __init__(self) -> None:
        self.error: ImportError | None = None

    def __enter__(self) -> PdfleetImports:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if isinstance(value, ImportError):
            self.error = value
            return True
        return False


def controller_module(argument_spec: dict[str, dict[str, Any]], imports: PdfleetImports) -> AnsibleModule:
    """The module with its arguments (check mode supported: every caller decides what check mode does), failed
    with the way out when the interpreter running it cannot import pdfleet."""
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    if imports.error is not None:
        module.fail_json(msg=f"the pdfleet package is not importable ({imports.error}): delegate the task to the "
                             "control machine and run ansible-playbook from the project venv "
                             "(.venv/bin/ansible-playbook)")
    return module
