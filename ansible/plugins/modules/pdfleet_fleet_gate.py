#!/usr/bin/python
"""Ansible module pdfleet_fleet_gate: before a host leaves, every other pair must serve (pdfleet.fleet)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pdfleet_fleet_gate
short_description: Refuse to take a host out unless enough other pairs serve
author: pdfleet (!UNKNOWN)
description:
  - Sends one real request through every other pair the router lists (straight to the pair as the router
    would, C(pdfleet.fleet.pair_canary)), and through every cross-host pairing of them, and counts the pairs
    that answered. Fails, before anything changes,
    when one of them does not answer or fewer than O(min_pairs) would keep serving without O(host).
  - Read-only (changed=false); runs in check mode too.
options:
  router_url: {description: "The router's base URL.", type: str, required: true}
  api_key: {description: "The router's API key, if any.", type: str}
  plan: {description: "The plan document (pdfleet_plan).", type: dict, required: true}
  host: {description: "The host about to leave the router (its pair is not counted).", type: str, required: true}
  min_pairs:
    description:
      - Pairs that must keep serving without O(host), kept as given.
      - Unset, 1, and 0 on a one-pair cluster (its pair leaves and nothing serves for a while).
    type: int
  model: {description: "Model name for the requests.", type: str, required: true}
  deadline: {description: "Seconds each request may take.", type: float, default: 30}
  cross: {description: "Also each serving prefill with every other serving host's decode.", type: bool, default: true}
"""

EXAMPLES = r"""
- name: Check the rest of the fleet before taking this host out
  pdfleet_fleet_gate:
    router_url: "{{ pdfleet_plan.router_url }}"
    plan: "{{ pdfleet_plan }}"
    host: "{{ inventory_hostname }}"
    model: "{{ pdfleet_plan.model.served_name or pdfleet_plan.model.name }}"
  delegate_to: localhost
"""

RETURN = r"""
serving: {description: "Hosts whose pair is listed and answered.", type: list, returned: always}
canaries: {description: "Each other pair's request (status, latency, problem).", type: list, returned: always}
effective_min_pairs: {description: "min_pairs as given (unset, 1; 0 on one pair).", type: int, returned: always}
"""

from ansible_collections.pdfleet.cluster.plugins.module_utils.pdfleet_module import (  # noqa: E402
    ROUTER_ARGS,
    PdfleetImports,
    controller_module,
)

with PdfleetImports() as IMPORTS:
    from pdfleet import fleet
    from pdfleet.rollout.plan import effective_min_pairs
    from pdfleet.rollout.state import membership


def main() -> None:
    module = controller_module({
        **ROUTER_ARGS,
        "plan": {"type": "dict", "required": True},
        "host": {"type": "str", "required": True},
        "min_pairs": {"type": "int"},
        "model": {"type": "str", "required": True},
        "deadline": {"type": "float", "default": 30.0},
        "cross": {"type": "bool", "default": True},
    }, IMPORTS)
    p = module.params
    pairs = fleet.pairs_from_plan_dict(p["plan"])
    try:
        listed = fleet.RouterClient(p["router_url"], p["api_key"]).workers()
    except fleet.RouterError as e:
        module.fail_json(msg=f"fleet gate for {p['host']}: {e}")
    others = {h: pr for h, pr in pairs.items() if h != p["host"]}
    eff_min = effective_min_pairs(p["min_pairs"], len(others) + 1)
    canaries, serving, problems = [], [], []
    for host, pair in others.items():
        state = membership(pair, listed)
        if state != "in":
            canaries.append({"host": host, "ok": False, "problem": f"router membership {state}"})
            continue
        c = fleet.pair_canary(pair, p["model"], p["deadline"])
        canaries.append(c.to_dict())
        if c.ok:
            serving.append(host)
        else:
            problems.append(f"{host}: {c.problem} (HTTP {c.status}, {c.latency_s:.1f} s)")
    if p["cross"]:  # the router pairs across hosts: each serving prefill with every other serving decode
        for cross in fleet.cross_pairs([others[h] for h in serving]):
            c = fleet.pair_canary(cross, p["model"], p["deadline"])
            canaries.append(c.to_dict())
            if not c.ok:
                problems.append(f"cross pair {cross.host}: {c.problem} (HTTP {c.status}, {c.latency_s:.1f} s)")
    result = {"changed": False, "serving": serving, "canaries": canaries, "effective_min_pairs": eff_min}
    if problems:
        module.fail_json(msg=f"fleet gate before {p['host']} leaves: pairs in the router that do not answer: "
                             + "; ".join(problems) + ". Nothing was changed; fix them first.", **result)
    if len(serving) < eff_min:
        module.fail_json(msg=f"fleet gate before {p['host']} leaves: only {len(serving)} other pair(s) serve "
                             f"({', '.join(serving) or 'none'}), min_pairs is {eff_min}. Nothing was changed.",
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
