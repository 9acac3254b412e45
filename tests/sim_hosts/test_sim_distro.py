"""A sim host reports the distribution its inventory says (pdfleet_sim_os; pdfleet_sim.distro): the identification
files written into its root, the image's own put back when it reports the image's distribution again."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pdfleet_sim import SimError, distro


def _golden(tmp_path: Path) -> tuple[Path, Path]:
    golden, root = tmp_path / "golden", tmp_path / "root"
    for d in (golden / "etc", golden / "usr/lib", root / "etc", root / "usr/lib"):
        d.mkdir(parents=True)
    for base in (golden, root):  # Debian's layout: /etc/os-release is a link into /usr/lib
        (base / "usr/lib/os-release").write_text('ID=debian\nVERSION_ID="12"\n')
        (base / "etc/os-release").symlink_to("../usr/lib/os-release")
        (base / "etc/debian_version").write_text("12.11\n")
    return golden, root


def test_a_host_reports_ubuntu_and_back(tmp_path: Path) -> None:
    golden, root = _golden(tmp_path)
    record = tmp_path / "os"
    assert distro.apply(root, golden, "ubuntu-24.04", record)
    release = (root / "etc/os-release").read_text()
    assert not (root / "etc/os-release").is_symlink() and 'ID="ubuntu"' in release and 'VERSION_ID="24.04"' in release
    assert (root / "usr/lib/os-release").read_text() == 'ID=debian\nVERSION_ID="12"\n'  # the link's target untouched
    assert "DISTRIB_RELEASE=24.04" in (root / "etc/lsb-release").read_text()
    assert not distro.apply(root, golden, "ubuntu-24.04", record)  # already so: nothing written
    assert distro.apply(root, golden, "debian-11", record)
    assert (root / "etc/debian_version").read_text() == "11.11\n" and not (root / "etc/lsb-release").exists()
    assert distro.apply(root, golden, distro.DEFAULT_OS, record)
    assert (root / "etc/os-release").is_symlink() and (root / "etc/debian_version").read_text() == "12.11\n"
    assert not (root / "etc/lsb-release").exists() and record.read_text() == "debian-12\n"


def test_an_unknown_distribution_is_refused_with_the_choices() -> None:
    with pytest.raises(SimError, match=r"sim host node1: pdfleet_sim_os 'ubuntu-20.04' .* use one of debian-12, "
                                       r"ubuntu-22.04, ubuntu-24.04"):
        distro.validate_os("node1", "ubuntu-20.04")


def test_the_inventory_names_what_a_host_reports(tmp_path: Path) -> None:
    from pdfleet_sim.cli import _inventory_sim

    (tmp_path / "group_vars/all").mkdir(parents=True)
    (tmp_path / "group_vars/all/sim.yml").write_text(yaml.safe_dump(
        {"pdfleet_sim": {"bridge": "pdft1", "cidr": "10.78.1.0/24", "gateway": "10.78.1.1"}}))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {
        "a": {"ansible_host": "10.78.1.11", "pdfleet_sim_os": "ubuntu-22.04"}, "b": {"ansible_host": "10.78.1.12"}}}}))
    hosts, _ = _inventory_sim(tmp_path)
    assert [(h.name, h.os) for h in hosts] == [("a", "ubuntu-22.04"), ("b", "debian-12")]
