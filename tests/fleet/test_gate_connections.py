"""The isolated gate reads journals over SSH from inside an Ansible module, where the payload's partial
`ansible` package shadows ansible-core: the hosts' connection settings come from a child interpreter, and
must be exactly what `Inventory.connection` says in-process."""

from __future__ import annotations

import pytest
from pdfleet.errors import InventoryError
from pdfleet.inventory import connections
from pdfleet.inventory_child import connections_in_child
from pdfleet.paths import REPO_ROOT

FLEET = REPO_ROOT / "inventory" / "sim-fleet"


def test_child_reads_the_same_connections_as_in_process() -> None:
    hosts = ["node1", "node3", "router1"]
    child = connections_in_child(FLEET, hosts)
    assert child == connections(FLEET, hosts)
    assert child["node3"].address == "10.79.0.13" and "-F" in child["node3"].ssh_args


def test_child_names_an_unknown_host() -> None:
    with pytest.raises(InventoryError, match="no host 'node9'"):
        connections_in_child(FLEET, ["node9"])
