"""The isolated gate in an interpreter of its own: ``python -m pdfleet.fleet.gaterun`` reads its arguments as
JSON on stdin, prints the protocol's progress on stderr and the ``GateResult`` as JSON on stdout.

The pdfleet_pair_gate module runs the gate through this. Inside an Ansible module the ``ansible`` package is
AnsiballZ's payload (module_utils only), which shadows the controller's: the journal reader loads the inventory
with ansible-core's controller code (``pdfleet.inventory``), and that import fails there (``cannot import name
'_ambient_context' from 'ansible.module_utils._internal'``), leaving the logs check unreadable and the gate
inconclusive. A child interpreter has the venv's ansible-core only.

Exit codes: 0 the gate ran (the result says whether it passed), 2 bad arguments (one line on stderr).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pdfleet.fleet.gate import gate_settings, isolated_gate
from pdfleet.fleet.pairs import Pair


def run(args: dict[str, Any]) -> dict[str, Any]:
    """The gate for ``args`` (pair, model, sglang_version, settings, inventory): ``GateResult.to_dict()``."""
    from pdfleet.verify.logs import SSHJournalLogs

    pair = Pair.from_dict(args["pair"])
    settings = gate_settings(**(args.get("settings") or {}))
    inventory = args.get("inventory")
    logs = SSHJournalLogs(Path(inventory)) if inventory else None
    return isolated_gate(pair, settings, logs, model=args.get("model"), sglang_version=args.get("sglang_version"),
                         out=sys.stderr).to_dict()


def main() -> int:
    try:
        args = json.loads(sys.stdin.read())
        result = run(args)
    except (ValueError, KeyError, TypeError) as e:
        print(f"pdfleet.fleet.gaterun: bad arguments: {type(e).__name__}: {e} (see pdfleet verify --help for the "
              "setting names)", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
