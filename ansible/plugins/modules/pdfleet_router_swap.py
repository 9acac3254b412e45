#!/usr/bin/python
"""Ansible module pdfleet_router_swap: the split-fleet swap of router membership (pdfleet.fleet)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pdfleet_router_swap
short_description: Swap router membership from the old half of a fleet to the new half
author: pdfleet (!UNKNOWN)
description:
  - With O(cohorts) on smg (C(pdfleet.fleet.RouterClient.swap_cohorts)) every listed worker gets the old
    cohort's pairing protocol, the new half is added with the new cohort's and confirmed ready, then the old
    half is removed (draining). smg pairs a prefill only with a decode of the same protocol, so some pairs
    always serve and none mixes two SGLang versions (C(gap_s) 0).
  - Otherwise (sglang-router 0.3.2) removes every worker of O(remove) (all queued at once, confirmed), then adds
    every worker of O(add): the router never lists both halves; between the two it lists none (C(gap_s); new
    requests there get a fast 503). Either way it then confirms that the router routes to the new half.
  - Idempotent (nothing to remove and everything present = changed=false); check mode reports only.
options:
  router_url: {description: "The router's base URL.", type: str, required: true}
  api_key: {description: "The router's API key, if any.", type: str}
  remove: {description: "Pairs to take out (host, members).", type: list, elements: dict, required: true}
  add: {description: "Pairs to put in.", type: list, elements: dict, required: true}
  model: {description: "Model name for the routing probes.", type: str, default: default}
  cohorts:
    description: "The old and the new half's SGLang versions (their pairing protocols on smg)."
    type: list
    elements: str
  confirm_timeout: {description: "Seconds to confirm routing to each added pair.", type: float, default: 60}
"""

EXAMPLES = r"""
- name: Swap the router from the old half to the new half
  pdfleet_router_swap:
    router_url: "{{ pdfleet_plan.router_url }}"
    remove: "{{ old_pairs }}"
    add: "{{ new_pairs }}"
  delegate_to: localhost
"""

RETURN = r"""
swap: {description: "removed, added, remove_s, gap_s, total_s.", type: dict, returned: changed}
confirmed: {description: "Each added pair's routing confirmation.", type: list, returned: changed}
"""

import time  # noqa: E402 - Ansible modules put their documentation first

from ansible_collections.pdfleet.cluster.plugins.module_utils.pdfleet_module import (  # noqa: E402
    ROUTER_ARGS,
    PdfleetImports,
    controller_module,
)

with PdfleetImports() as IMPORTS:
    from pdfleet import fleet


def main() -> None:
    module = controller_module({
        **ROUTER_ARGS,
        "remove": {"type": "list", "elements": "dict", "required": True},
        "add": {"type": "list", "elements": "dict", "required": True},
        "model": {"type": "str", "default": "default"},
        "confirm_timeout": {"type": "float", "default": 60.0},
        "cohorts": {"type": "list", "elements": "str"},
    }, IMPORTS)
    p = module.params
    started = time.time()
    router = fleet.RouterClient(p["router_url"], p["api_key"])
    old = [fleet.Pair.from_dict(d) for d in p["remove"]]
    new = [fleet.Pair.from_dict(d) for d in p["add"]]
    try:
        listed = {w.spec.url for w in router.workers()}
        remove_urls = [u for pr in old for u in pr.urls if u in listed]
        add_specs = [m.spec() for pr in new for m in pr.members if m.url not in listed]
        if not remove_urls and not add_specs:
            module.exit_json(changed=False, started=started, finished=time.time())
        if module.check_mode:
            module.exit_json(changed=True, would_remove=remove_urls, would_add=[s.url for s in add_specs])
        cohorts = p["cohorts"]
        if cohorts is not None and len(cohorts) != 2:
            module.fail_json(msg=f"swap: cohorts is {cohorts}; give the old and the new SGLang version")
        labels = (fleet.cohort_label(cohorts[0]), fleet.cohort_label(cohorts[1])) if cohorts else None
        swap = router.swap(remove_urls, add_specs, cohorts=labels)
        confirmed = [fleet.readd(router, pr, None, p["model"], p["confirm_timeout"]) for pr in new]
    except fleet.RouterError as e:
        module.fail_json(msg=f"swap: {e}")
    result = {"changed": True, "swap": swap, "confirmed": [c.to_dict() for c in confirmed], "started": started,
              "finished": time.time()}
    bad = [p for c in confirmed for p in c.problems]
    if bad:
        module.fail_json(msg="swap: the router lists the new half but does not route to it: " + "; ".join(bad),
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
