#!/usr/bin/python
"""Ansible module pdfleet_rollout_report: write the rollout's JSON report (pdfleet.rollout.report)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pdfleet_rollout_report
short_description: Write the rollout report (timeline and seconds per host, outcome, table)
author: pdfleet (!UNKNOWN)
description:
  - Writes C(pdfleet.rollout.report.build)'s JSON to O(path) on the control machine, and its HTML page beside it
    (the same stem, C(.html): per-host timeline, pairing samples, table). A local artefact of the
    run, so it reports changed=false; in check mode nothing is written.
options:
  path: {description: "Where to write the report.", type: path, required: true}
  rollout: {description: "The rollout plan (pdfleet_rollout_plan's result).", type: dict, required: true}
  timelines: {description: Host -> its timeline marks (epochs)., type: dict, default: {}}
  outcome: {description: "ok, and on failure host, step, message.", type: dict, required: true}
  started: {description: "Epoch the rollout began.", type: float, required: true}
  swap: {description: "The split-fleet swap's measurements.", type: dict}
  one_pair: {description: "The cluster has one pair (report the window without service).", type: bool, default: false}
  bench: {description: "The benchmark check after the last host (against the baseline before the first).", type: dict}
"""

EXAMPLES = r"""
- name: Write the report
  pdfleet_rollout_report:
    path: reports/rollout.json
    rollout: "{{ pdfleet_rollout }}"
    outcome: {ok: true}
    started: "{{ pdfleet_rollout_started }}"
"""

RETURN = r"""
table: {description: "The per-host table.", type: list, returned: always}
path: {description: "The report's path.", type: str, returned: always}
page: {description: "The HTML page's path (null in check mode).", type: str, returned: always}
"""

import time  # noqa: E402 - Ansible modules put their documentation first
from pathlib import Path  # noqa: E402

from ansible_collections.pdfleet.cluster.plugins.module_utils.pdfleet_module import (  # noqa: E402
    PdfleetImports,
    controller_module,
)

with PdfleetImports() as IMPORTS:
    from pdfleet.rollout import report


def main() -> None:
    module = controller_module({
        "path": {"type": "path", "required": True},
        "rollout": {"type": "dict", "required": True},
        "timelines": {"type": "dict", "default": {}},
        "outcome": {"type": "dict", "required": True},
        "started": {"type": "float", "required": True},
        "swap": {"type": "dict"},
        "one_pair": {"type": "bool", "default": False},
        "bench": {"type": "dict"},
    }, IMPORTS)
    p = module.params
    data = report.build(p["rollout"], p["timelines"], p["outcome"], p["started"], time.time(), p["swap"],
                        p["one_pair"], p["bench"])
    page = None
    if not module.check_mode:
        page = str(report.write(Path(p["path"]), data))
    module.exit_json(changed=False, table=data["table"], path=p["path"], page=page, total_s=data["total_s"],
                     sum_gates_s=data["sum_gates_s"])


if __name__ == "__main__":
    main()
