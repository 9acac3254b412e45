#!/usr/bin/python
"""Ansible module pdfleet_probe: documentation only; the work is done by the action plugin of that name."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pdfleet_probe
short_description: Run a role's read-only probe script on the host in one round trip
author: pdfleet (!UNKNOWN)
description:
  - Runs O(src) (a file under the role's C(files/)) with the host's Python; O(settings) go to its standard input
    as one JSON line and the JSON document it prints comes back as RV(probe).
  - Read-only and never changed; it runs in check mode too. Implemented by the action plugin
    C(ansible/plugins/action/pdfleet_probe.py), which the repository's C(ansible.cfg) enables.
options:
  src: {description: "The probe script's file name under the role's files/.", type: str, required: true}
  settings: {description: What the probe compares against (JSON-able)., type: raw, default: {}}
  python:
    description: "The interpreter on the host (default: the host's Ansible interpreter, else python3)."
    type: str
"""

EXAMPLES = r"""
- name: Probe the host once
  pdfleet_probe:
    src: probe.py
    settings: {profile: /etc/profile.d/cuda.sh}
  register: __cuda_toolkit_probe_run
"""

RETURN = r"""
probe: {description: "The JSON document the probe printed.", returned: success, type: dict}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - Ansible modules put their documentation first


def main() -> None:
    module = AnsibleModule(argument_spec={"src": {"type": "str", "required": True},
                                          "settings": {"type": "raw", "default": {}},
                                          "python": {"type": "str"}},
                           supports_check_mode=True)
    module.fail_json(msg="pdfleet_probe runs as an action plugin: run Ansible from the repository root, whose "
                         "ansible.cfg sets action_plugins = ansible/plugins/action")


if __name__ == "__main__":
    main()
