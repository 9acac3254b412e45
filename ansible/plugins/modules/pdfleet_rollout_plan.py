#!/usr/bin/python
"""Ansible module pdfleet_rollout_plan: the rollout plan from the hosts' records and the router (pdfleet.rollout)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pdfleet_rollout_plan
short_description: Plan a rollout from each host's sglang record and the router's worker list
author: pdfleet (!UNKNOWN)
description:
  - Thin wrapper over C(pdfleet.rollout.plan.build), the same code as C(pdfleet rollout plan). Read-only.
options:
  plan: {description: "The plan document (pdfleet_plan).", type: dict, required: true}
  records: {description: "Host -> its parsed pdfleet-record.json (null when absent).", type: dict, required: true}
  router_url: {description: "The router's base URL.", type: str, required: true}
  api_key: {description: "The router's API key, if any.", type: str}
  serial: {description: "Batch sizes (Ansible serial semantics).", type: list, elements: raw, default: [1, 1]}
  model: {description: "The served model name, for the serving pairs' direct canaries.", type: str, required: true}
  allow_degraded:
    description:
      - Plan even when a pair the router serves with fails its direct canary (a request through the pair, no
        router); by default such a fleet is refused, naming the pair, before anything changes.
    type: bool
    default: false
  canary_deadline_s: {description: "Seconds for each serving pair's canary (all at once).", type: float, default: 20}
  min_pairs:
    description:
      - Pairs that must keep serving at every step, kept as given (a plan that cannot keep them is refused).
      - Unset, 1, and 0 on a one-pair cluster (the report gives its window without service).
    type: int
"""

EXAMPLES = r"""
- name: Plan the rollout
  pdfleet_rollout_plan:
    plan: "{{ pdfleet_plan }}"
    records: "{{ records }}"
    router_url: "{{ pdfleet_plan.router_url }}"
"""

RETURN = r"""
rollout: {description: "strategy, order, batches, halves, actions, steps, refusal.", type: dict, returned: always}
table: {description: "The plan for people.", type: list, returned: always}
"""

from ansible_collections.pdfleet.cluster.plugins.module_utils.pdfleet_module import (  # noqa: E402
    ROUTER_ARGS,
    PdfleetImports,
    controller_module,
)

with PdfleetImports() as IMPORTS:
    from pdfleet.fleet.router import RouterClient, RouterError
    from pdfleet.rollout import plan as rollout_plan
    from pdfleet.rollout.health import apply_health, check_serving_pairs
    from pdfleet.rollout.state import host_states


def main() -> None:
    module = controller_module({
        **ROUTER_ARGS,
        "plan": {"type": "dict", "required": True},
        "records": {"type": "dict", "required": True},
        "serial": {"type": "list", "elements": "raw", "default": [1, 1]},
        "min_pairs": {"type": "int"},
        "model": {"type": "str", "required": True},
        "allow_degraded": {"type": "bool", "default": False},
        "canary_deadline_s": {"type": "float", "default": 20.0},
    }, IMPORTS)
    p = module.params
    try:
        listed = RouterClient(p["router_url"], p["api_key"]).workers()
    except RouterError as e:
        module.fail_json(msg=f"rollout plan: {e}")
    try:
        states = host_states(p["plan"], p["records"], listed)
        plan = rollout_plan.build(states, p["serial"], p["min_pairs"])
    except rollout_plan.RolloutPlanError as e:
        module.fail_json(msg=str(e))
    apply_health(plan, check_serving_pairs(states, p["model"], p["canary_deadline_s"]), p["allow_degraded"])
    module.exit_json(changed=False, rollout=plan.to_dict(), table=rollout_plan.table(plan).splitlines())


if __name__ == "__main__":
    main()
