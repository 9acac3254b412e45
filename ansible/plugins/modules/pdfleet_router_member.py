#!/usr/bin/python
"""Ansible module pdfleet_router_member: a pair's workers in or out of the router (pdfleet.fleet)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pdfleet_router_member
short_description: Put a pair's SGLang workers in or out of the router, draining on the way out
author: pdfleet (!UNKNOWN)
description:
  - Thin wrapper over C(pdfleet.fleet). C(state=absent) removes the pair's workers from the router
    (sglang-router 0.3.2 C(DELETE /workers/{id}), polled until gone), returns their exact specs and then waits
    until the workers' own numbers say idle, up to O(drain_timeout).
  - C(state=present) adds the workers back (the given specs, else the plan's) and, with O(confirm), sends
    requests through the router until every worker's own request counter moved.
  - Idempotent; in check mode it only reports what it would change. Run it on the control machine
    (delegate it to localhost).
options:
  router_url: {description: "The router's base URL (the plan's router_url).", type: str, required: true}
  api_key: {description: "The router's API key, if it has one.", type: str}
  pair: {description: "The pair: C(host) and C(members) (name, role, url, ...).", type: dict, required: true}
  state: {description: "In or out of the router.", type: str, choices: [present, absent], default: present}
  specs: {description: "Specs from C(state=absent), to add back exactly.", type: list, elements: dict, default: []}
  drain_timeout: {description: "Seconds to wait for idle after removal (0 = do not wait).", type: float, default: 300}
  fail_on_busy: {description: "Fail when the workers are not idle by the deadline.", type: bool, default: true}
  confirm: {description: "After adding, confirm that the router routes to every worker.", type: bool, default: true}
  confirm_timeout: {description: "Seconds to confirm routing.", type: float, default: 60}
  model: {description: "Model name for the routing probes.", type: str, default: default}
  wait: {description: "Seconds to wait for the router's listing to show each change.", type: float, default: 30}
  plan: {description: "The plan document; with it, re-adding also checks every cross-host pairing.", type: dict}
"""

EXAMPLES = r"""
- name: Take this host's pair out of the router and wait for its requests to finish
  pdfleet_router_member:
    router_url: "{{ pdfleet_plan.router_url }}"
    pair: "{{ pdfleet_rollout.actions[inventory_hostname].pair }}"
    state: absent
    drain_timeout: 300
  delegate_to: localhost
  register: drained
"""

RETURN = r"""
removed: {description: "The specs of the workers removed (for re-adding).", type: list, returned: always}
drain: {description: "Removal and idle wait measurements.", type: dict, returned: state=absent}
readd: {description: "Re-add and routing confirmation.", type: dict, returned: state=present}
membership_before: {description: "in, out or partial.", type: str, returned: always}
started: {description: "Epoch when the module began.", type: float, returned: always}
finished: {description: "Epoch when it ended.", type: float, returned: always}
"""

import time  # noqa: E402 - Ansible modules put their documentation first

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - Ansible modules put their documentation first
from ansible_collections.pdfleet.cluster.plugins.module_utils.pdfleet_module import (  # noqa: E402
    ROUTER_ARGS,
    PdfleetImports,
    controller_module,
)

with PdfleetImports() as IMPORTS:
    from pdfleet import fleet
    from pdfleet.rollout.state import membership


def main() -> None:
    module = controller_module({
        **ROUTER_ARGS,
        "pair": {"type": "dict", "required": True},
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "specs": {"type": "list", "elements": "dict", "default": []},
        "drain_timeout": {"type": "float", "default": 300.0},
        "fail_on_busy": {"type": "bool", "default": True},
        "confirm": {"type": "bool", "default": True},
        "confirm_timeout": {"type": "float", "default": 60.0},
        "model": {"type": "str", "default": "default"},
        "wait": {"type": "float", "default": 30.0},
        "plan": {"type": "dict"},
    }, IMPORTS)
    p = module.params
    started = time.time()
    pair = fleet.Pair.from_dict(p["pair"])
    router = fleet.RouterClient(p["router_url"], p["api_key"])
    try:
        before = membership(pair, router.workers())
        if p["state"] == "absent":
            result = _absent(module, router, pair, before)
        else:
            result = _present(module, router, pair, before)
    except fleet.RouterError as e:
        module.fail_json(msg=f"{pair.host}: {e}", membership_before=None, started=started)
    module.exit_json(membership_before=before, started=started, finished=time.time(), **result)


def _absent(module: AnsibleModule, router: fleet.RouterClient, pair: fleet.Pair, before: str) -> dict:
    p = module.params
    listed = {w.spec.url: w.spec for w in router.workers()}
    if module.check_mode:
        return {"changed": before != "out", "removed": [listed[u].to_dict() for u in pair.urls if u in listed]}
    t0 = time.monotonic()
    # out of selection (smg: draining) is enough to start the wait on the workers' own numbers; the gateway's
    # removal (its drain settle) runs beside it and is waited for after
    removed = fleet.remove_pair(router, pair, p["wait"], until_gone=False)
    removed_s = time.monotonic() - t0
    idle = fleet.wait_idle([(m.url, m.role) for m in pair.members], p["drain_timeout"]) if p["drain_timeout"] > 0 \
        else fleet.IdleResult(True, 0.0, [])
    router.wait_gone([s.url for s in removed], p["wait"])
    drain = fleet.DrainResult(pair.host, removed, idle, removed_s).to_dict()
    result = {"changed": bool(removed), "removed": [s.to_dict() for s in removed], "drain": drain}
    if not idle.idle and p["fail_on_busy"]:
        module.fail_json(msg=f"{pair.host}: drain: not idle after {idle.waited_s:.0f} s (drain_timeout "
                             f"{p['drain_timeout']:g} s): {idle.describe()}; the pair is out of the router",
                         **result)
    return result


def _present(module: AnsibleModule, router: fleet.RouterClient, pair: fleet.Pair, before: str) -> dict:
    p = module.params
    specs = [fleet.WorkerSpec.from_dict(s) for s in p["specs"]]
    if module.check_mode:
        return {"changed": before != "in", "removed": []}
    if before == "in":
        return {"changed": False, "removed": [], "readd": None}
    others = None
    if p["plan"] and p["confirm"]:
        listed = router.workers()
        others = [o for h, o in fleet.pairs_from_plan_dict(p["plan"]).items()
                  if h != pair.host and membership(o, listed) == "in"]
    res = fleet.readd(router, pair, specs, p["model"], p["confirm_timeout"] if p["confirm"] else 0.0, p["wait"],
                      others=others)
    result = {"changed": bool(res.added), "removed": [], "readd": res.to_dict()}
    if p["confirm"] and not res.confirmed:
        module.fail_json(msg=f"{pair.host}: re-add: the router lists the pair but does not route to it: "
                             + "; ".join(res.problems), **result)
    return result


if __name__ == "__main__":
    main()
