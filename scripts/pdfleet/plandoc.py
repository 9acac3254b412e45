"""The plan document: what `pdfleet plan --json` prints and what the `pdfleet_plan` Ansible filter returns.

One document, one schema version, made by one function, so the CLI, the plays and the files handed between
them (the verification play gives `pdfleet verify --plan FILE` the plan the preflight computed) never differ.
Besides the plan itself (profile, versions, per-host units with their first-class fields) it carries what
Ansible needs to render exactly what `pdfleet render` previews (`contexts`), the facts the roles take as inputs
(`role_facts`: the record's and the model manifest's file names, the lease store's and the watchdog's state
directories, the driver's hold pattern, the patch's hashes) and the simulated hosts' version-specific packages
(`sim_packages`). It names no path of the control machine, so every install (a checkout, a wheel) prints the same
document; `control_paths` gives those paths apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pdfleet.errors import PdfleetError
from pdfleet.firewall import host_firewalls
from pdfleet.launchcheck import store as launchstore
from pdfleet.patch import roleinputs
from pdfleet.paths import PACKAGE_DIR, REPO_ROOT, TEMPLATE_DIR
from pdfleet.planner import Plan
from pdfleet.render import unit_context
from pdfleet.versions import (
    CONSTANTS,
    LEASE_DIR,
    MODEL_MANIFEST_NAME,
    RECORD_NAME,
    WATCHDOG_STATE_DIR,
)

SCHEMA = "pdfleet-plan/1"


class PlanDocumentError(PdfleetError):
    """A plan file that is missing, unreadable or of another schema (exit 2)."""


def plan_document(plan: Plan) -> dict[str, Any]:
    """The plan as one JSON-able document (schema SCHEMA)."""
    doc: dict[str, Any] = {"schema": SCHEMA, **plan.to_dict()}
    doc["contexts"] = {
        host: [{k: v for k, v in unit_context(u, plan).items() if k != "ansible_managed"} for u in units]
        for host, units in plan.hosts.items()
    }
    # Each host's firewall: its allow-list and nftables ruleset (pdfleet.firewall; the pdfleet_firewall role's input).
    doc["host_firewalls"] = host_firewalls(plan)
    doc["role_facts"] = {"record_name": RECORD_NAME, "model_manifest_name": MODEL_MANIFEST_NAME,
                         "lease_dir": str(LEASE_DIR), "watchdog_state_dir": str(WATCHDOG_STATE_DIR),
                         "driver_hold_regex": dict(CONSTANTS["driver_hold_regex"]),
                         "sglang_patch": roleinputs.patch_facts(str(plan.sglang["version"]))}
    # What the pinned SGLang resolves each worker to (pdfleet.launchcheck, committed), or how to resolve it.
    doc["effective_settings"] = launchstore.effective_settings(plan)
    doc["sim_packages"] = roleinputs.sim_packages(str(plan.sglang["version"]))
    # A JSON round trip, so the document is exactly what a file or the CLI would carry.
    return json.loads(json.dumps(doc))


def control_paths(doc: dict[str, Any]) -> dict[str, str]:
    """Where the files a plan's plays use are on the control machine: the bundle's root (its reports/), the unit
    templates, the package (its files run on hosts by pdfleet_probe) and the patch of the planned version."""
    version = str(doc["sglang"]["version"])
    return {"bundle": str(REPO_ROOT), "templates": str(TEMPLATE_DIR), "package": str(PACKAGE_DIR),
            "patch_file": roleinputs.patch_file(version)}


def read_plan_document(path: Path) -> dict[str, Any]:
    """A plan document from a file (``-``: standard input); refuses another schema with the way out."""
    try:
        doc = json.loads(sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8"))
    except OSError as e:
        raise PlanDocumentError(f"{path}: cannot read the plan document ({e.strerror or e})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise PlanDocumentError(f"{path}: not a JSON plan document ({e}); write one with pdfleet plan --json") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise PlanDocumentError(f"{path}: plan schema {found!r}, this pdfleet reads {SCHEMA!r}; regenerate it with "
                                "this version's pdfleet plan --json (or site.yml's preflight)")
    return doc
