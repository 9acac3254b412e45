"""Callback pdfleet.cluster.pdfleet_preload: load the Jinja filter, test and lookup plugins once, in the controller,
before any task.

Ansible forks a worker process for every task and host. A worker that meets its first filter or test plugin (or a
``lookup``) loads the plugin files of that kind, and the loaded plugins die with the worker: measured on a converged
four-host sim fleet, half of a no-op's ~100 workers loaded every test plugin file again (10-80 ms each, most of a
skipped task's cost). Loaded once here, before the first play, every worker inherits them (fork: copy-on-write).
Nothing else changes: which plugin a template gets is decided by the same loaders, only earlier.

Enabled in ansible.cfg (``callbacks_enabled = pdfleet.cluster.pdfleet_preload``); a run without it is only slower.
"""

from __future__ import annotations

DOCUMENTATION = """
name: pdfleet_preload
type: aggregate
short_description: load the Jinja filter, test and lookup plugins in the controller before the workers fork
description:
  - At the start of a playbook, loads every filter and test plugin and the lookup plugins the pdfleet roles use,
    so the per-task worker processes inherit them instead of each loading them again.
requirements:
  - enabled in ansible.cfg (callbacks_enabled = pdfleet.cluster.pdfleet_preload)
"""

# The imports follow the documentation (ansible-test sanity: import-before-documentation).
import importlib  # noqa: E402
from typing import Any  # noqa: E402

from ansible.plugins.loader import filter_loader, lookup_loader, test_loader  # noqa: E402

from ansible.plugins.callback import CallbackBase  # noqa: E402

# The lookups and this collection's filters the roles and plays call, by their full names. filter_loader.all()
# loads only the filters outside collections (ansible.builtin's); a collection's are loaded by name.
LOOKUPS = ("ansible.builtin.file", "ansible.builtin.fileglob", "ansible.builtin.env",
           "pdfleet.cluster.pdfleet_template")
FILTERS = tuple(f"pdfleet.cluster.{name}" for name in (
    "pdfleet_plan", "pdfleet_control_paths", "pdfleet_units_prune", "pdfleet_python_problems",
    "pdfleet_gpu_peer_problems", "pdfleet_gpu_peer_modes", "pdfleet_connections"))


def preload() -> list[str]:
    """Load the plugins; the names of the lookups and filters that could not be loaded (none on a sound
    installation)."""
    list(filter_loader.all())
    list(test_loader.all())
    for kind in ("filter", "test", "lookup"):  # the packages a name without a collection is looked up in first
        importlib.import_module(f"ansible_collections.ansible.builtin.plugins.{kind}")
    return ([name for name in LOOKUPS if lookup_loader.get(name) is None]
            + [name for name in FILTERS if filter_loader.get(name) is None])


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "pdfleet.cluster.pdfleet_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        missing = preload()
        if missing:
            self._display.warning(f"pdfleet_preload: plugin(s) not found: {', '.join(missing)}")
