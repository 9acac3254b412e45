#!/usr/bin/python
"""Ansible module pdfleet_fleet_bench: the rollout's regression benchmark (pdfleet.rollout.bench)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pdfleet_fleet_bench
short_description: Benchmark the fleet through its router against a baseline taken earlier in the run
author: pdfleet (!UNKNOWN)
description:
  - pdfleet.verify's load and comparison (the protocol's tolerances) through the production router. With
    O(save) the result becomes the baseline in O(baseline_file); without, it is compared with it and the module
    fails on a regression. Read-only for the cluster (changed=false); skipped in check mode.
options:
  router_url: {description: "The router's base URL.", type: str, required: true}
  api_key: {description: "The router's API key, if any (sent to the router only).", type: str}
  model: {description: "The served model name.", type: str, required: true}
  baseline_file: {description: "This run's baseline file.", type: path, required: true}
  save: {description: "Save this result as the baseline (before the first host).", type: bool, default: false}
  settings: {description: "Benchmark setting overrides (bench_requests, ...).", type: dict, default: {}}
"""

EXAMPLES = r"""
- name: Baseline before the first host
  pdfleet_fleet_bench:
    router_url: "{{ pdfleet_plan.router_url }}"
    model: "{{ pdfleet_plan.model.name }}"
    baseline_file: reports/rollout/baseline.json
    save: true
"""

RETURN = r"""
bench: {description: "The benchmark check (status, summary, measured).", type: dict, returned: always}
"""

from pathlib import Path  # noqa: E402 - Ansible modules put their documentation first

from ansible_collections.pdfleet.cluster.plugins.module_utils.pdfleet_module import (  # noqa: E402
    PdfleetImports,
    controller_module,
)

with PdfleetImports() as IMPORTS:
    from pdfleet.rollout import bench


def main() -> None:
    module = controller_module({
        "router_url": {"type": "str", "required": True},
        "api_key": {"type": "str", "no_log": True},
        "model": {"type": "str", "required": True},
        "baseline_file": {"type": "path", "required": True},
        "save": {"type": "bool", "default": False},
        "settings": {"type": "dict", "default": {}},
    }, IMPORTS)
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: the benchmark sends traffic, not run")
    try:
        check = bench.run(p["router_url"], p["model"], Path(p["baseline_file"]), p["save"], api_key=p["api_key"],
                          **p["settings"])
    except TypeError as e:
        module.fail_json(msg=f"bad benchmark setting: {e}")
    if check["status"] in ("fail", "error"):
        module.fail_json(msg=f"benchmark {check['status']}: {'; '.join(check.get('failures') or [check['summary']])}",
                         bench=check)
    module.exit_json(changed=False, bench=check)


if __name__ == "__main__":
    main()
