"""Reading the fleet's state from the control machine for ``pdfleet rollout plan|status``: each host's record
over SSH (pdfleet.remote, the inventory's own connection settings) and the router's worker list."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from pdfleet.fleet.router import RouterClient, RouterError, RouterWorker
from pdfleet.inventory import InventorySource, load_inventory
from pdfleet.inventory_plan import plan_inventory
from pdfleet.remote import RemoteError, connection_for, run
from pdfleet.rollout.state import HostState, host_states
from pdfleet.versions import RECORD_NAME


def read_records(inventory: InventorySource | Path,
                 plan: dict[str, Any]) -> tuple[dict[str, dict[str, Any] | None], dict[str, str]]:
    """Host -> its record (None when absent), and host -> why it could not be read."""
    inv = load_inventory(inventory)
    path = f"{plan['sglang']['venv']}/{RECORD_NAME}"
    records: dict[str, dict[str, Any] | None] = {}
    errors: dict[str, str] = {}
    for host in plan["hosts"]:
        try:
            _, out, _ = run(connection_for(inv, host), f"cat {shlex.quote(path)} 2>/dev/null || true", timeout=30)
        except RemoteError as e:
            errors[host] = str(e)
            records[host] = None
            continue
        try:
            records[host] = json.loads(out) if out.strip() else None
        except ValueError:
            errors[host] = f"{host}: {path} is not JSON"
            records[host] = None
    return records, errors


def router_listing(plan: dict[str, Any], api_key: str | None = None) -> tuple[list[RouterWorker], str]:
    """The router's workers, or an empty list and why it could not be read."""
    try:
        return RouterClient(str(plan["router_url"]), api_key).workers(), ""
    except RouterError as e:
        return [], str(e)


def collect(inventory: InventorySource | Path,
            api_key: str | None = None) -> tuple[dict[str, Any], list[HostState], str]:
    """(plan document, every host's state, router error or "")."""
    plan = plan_inventory(inventory).to_dict()
    records, errors = read_records(inventory, plan)
    listed, router_error = router_listing(plan, api_key)
    return plan, host_states(plan, records, listed, errors), router_error
