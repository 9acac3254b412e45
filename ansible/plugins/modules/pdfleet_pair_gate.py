#!/usr/bin/python
"""Ansible module pdfleet_pair_gate: the verification protocol against one pair, in isolation (pdfleet.fleet)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pdfleet_pair_gate
short_description: Gate one pair through a temporary router that knows only it
author: pdfleet (!UNKNOWN)
description:
  - Thin wrapper over C(pdfleet.fleet.isolated_gate). Starts the gateway (smg, a pdfleet dependency) on the
    control machine's loopback with only this pair, runs pdfleet.verify's config gate, deep liveness, an abort
    cascade, recovery and the journal scan (journald over SSH with the inventory's settings) against it, and
    stops the router.
  - The production router is never touched. Fails unless the verdict is pass, naming each failing check and
    its measured values. Never changes anything (changed=false); skipped in check mode (it aborts sessions).
options:
  pair: {description: "The pair: C(host) and C(members).", type: dict, required: true}
  model: {description: "The served model name the workers must report.", type: str}
  sglang_version: {description: "The SGLang version the workers must report.", type: str}
  settings: {description: Overrides of gate_settings (verify Settings fields)., type: dict, default: {}}
  connections:
    description:
      - How to reach the pair's hosts over SSH for the journal scan (host -> name, address, port, user, key_file,
        ssh_args), from the play's hostvars with the pdfleet_connections filter (Vault already opened); none = no scan.
    type: dict
  report: {description: "Write the protocol's JSON report here, and its page beside it (same stem, .html).", type: path}
"""

EXAMPLES = r"""
- name: Gate this host's pair before the production router sees it
  pdfleet_pair_gate:
    pair: "{{ pdfleet_rollout.actions[inventory_hostname].pair }}"
    model: "{{ pdfleet_plan.model.served_name or pdfleet_plan.model.name }}"
    sglang_version: "{{ pdfleet_plan.sglang.version }}"
    connections: "{{ [inventory_hostname] | pdfleet.cluster.pdfleet_connections(hostvars) }}"
  delegate_to: localhost
"""

RETURN = r"""
gate:
  description: "ok, verdict, failures (check, status, summary, measured), seconds, page (its HTML page or null)."
  type: dict
  returned: always
started: {description: "Epoch when the gate began.", type: float, returned: always}
finished: {description: "Epoch when it ended.", type: float, returned: always}
"""

import io  # noqa: E402 - Ansible modules put their documentation first
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from ansible_collections.pdfleet.cluster.plugins.module_utils.pdfleet_module import (  # noqa: E402
    PdfleetImports,
    controller_module,
)

with PdfleetImports() as IMPORTS:
    from pdfleet import fleet
    from pdfleet.htmlreport import write_verify_page
    from pdfleet.inventory import HostConnection
    from pdfleet.verify.logs import SSHJournalLogs


def main() -> None:
    module = controller_module({
        "pair": {"type": "dict", "required": True},
        "model": {"type": "str"},
        "sglang_version": {"type": "str"},
        "settings": {"type": "dict", "default": {}},
        "connections": {"type": "dict"},
        "report": {"type": "path"},
    }, IMPORTS)
    p = module.params
    started = time.time()
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: the gate sends traffic, not run",
                         started=started, finished=started)
    pair = fleet.Pair.from_dict(p["pair"])
    try:
        settings = fleet.gate_settings(**p["settings"])
    except TypeError as e:
        module.fail_json(msg=f"{pair.host}: bad gate setting ({e}); see pdfleet verify --help for the names")
    logs = None
    if p["connections"]:
        hosts = {h: HostConnection(**{**c, "ssh_args": tuple(c.get("ssh_args") or ())})
                 for h, c in p["connections"].items()}
        missing = sorted({m.host for m in pair.members if m.host} - set(hosts))
        if missing:
            module.fail_json(msg=f"{pair.host}: gate not run: no connection settings for {', '.join(missing)}",
                             started=started, finished=time.time())
        logs = SSHJournalLogs(Path("."), hosts=hosts)
    out = io.StringIO()
    res = fleet.isolated_gate(pair, settings, logs, model=p["model"], sglang_version=p["sglang_version"], out=out)
    page = None
    if p["report"]:
        Path(p["report"]).parent.mkdir(parents=True, exist_ok=True)
        Path(p["report"]).write_text(json.dumps(res.to_dict(), indent=2, sort_keys=True) + "\n")
        if res.report:  # the protocol ran: its page beside the JSON (the rollout page links it)
            page = str(write_verify_page(Path(p["report"]), res.report))
    gate = {k: v for k, v in res.to_dict().items() if k != "report"}
    gate["page"] = page
    gate["progress"] = out.getvalue().splitlines()[-40:]
    if not res.ok:
        module.fail_json(msg=res.describe(), gate=gate, started=started, finished=time.time())
    module.exit_json(changed=False, gate=gate, started=started, finished=time.time())


if __name__ == "__main__":
    main()
