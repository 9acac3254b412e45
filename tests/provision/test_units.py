"""Unit tests (no root, no hosts): the stand-in repository's packages and the conformance comparisons."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
from pdfleet import conformance as c
from pdfleet.clusterspec import HostSpec
from pdfleet.inventory import load_inventory
from pdfleet.inventory_plan import plan_inventory, supported_patches
from pdfleet.planner import build_plan
from pdfleet.versions import PINS
from pdfleet_sim import aptrepo

ROLE_VARS = Path(__file__).resolve().parents[2] / "ansible/roles/nvidia_driver/vars"
EXAMPLES = Path(__file__).resolve().parents[2] / "inventory" / "examples"


def test_every_stand_in_is_marked() -> None:
    for pkg in aptrepo.packages("6.1.0-test"):
        assert pkg.control().splitlines()[-3].startswith(f"Description: {aptrepo.STANDIN}:"), pkg.name


def _role_distributions() -> dict:
    """The role's entries by distribution name: vars/<Distribution>.yml, as its tasks/main.yml loads them."""
    import yaml

    entries = [entry for path in sorted(ROLE_VARS.glob("*.yml")) if path.name != "main.yml"
               for entry in yaml.safe_load(path.read_text()).values()]
    return {entry["name"]: entry for entry in entries}


def test_the_repository_serves_every_release_the_role_supports() -> None:
    paths = {path for entry in _role_distributions().values() for path in entry["releases"].values()}
    assert paths == {"debian12", "ubuntu2204", "ubuntu2404"} == set(aptrepo.DISTRO_REVISIONS)


@pytest.mark.parametrize(("name", "path"), [(name, path) for name, entry in _role_distributions().items()
                                            for path in entry["releases"].values()])
def test_the_role_installs_what_the_repository_offers(name: str, path: str) -> None:
    """The role's package names for the distribution (its branch put in), at the pin and its revision, are what the
    stand-in repository of that distribution's path offers; the other distribution's names are not there."""
    entries = _role_distributions()
    branch = aptrepo.DRIVER_VERSIONS[0].split(".")[0]
    pinned = aptrepo.DRIVER_VERSIONS[0] + entries[name]["package_revision"]
    assert aptrepo.DISTRO_REVISIONS[path] == entries[name]["package_revision"]

    def names(entry: dict) -> set[str]:
        return {p.replace("{{ nvidia_driver_branch }}", branch) for p in entry["packages"]}

    offered = {p.name for p in aptrepo.packages("6.1.0-test", path) if p.version == pinned}
    assert names(entries[name]) <= offered
    for other, entry in entries.items():
        if other != name:
            assert not (names(entry) - names(entries[name])) & offered, other


@pytest.mark.skipif(subprocess.run(["which", "dpkg-deb"], capture_output=True).returncode != 0, reason="no dpkg-deb")
def test_repository_is_signed_and_indexed(tmp_path: Path) -> None:
    aptrepo.build(tmp_path / "www", kernel="6.1.0-test")
    repo = tmp_path / "www" / aptrepo.DISTRO_PATH
    packages = (repo / "Packages").read_text()
    assert "Package: nvidia-kernel-open-dkms\nVersion: 580.95.05-1" in packages
    assert "Package: nvidia-modprobe\nVersion: 590.48.01-1" in packages
    assert (repo / "InRelease").read_text().startswith("-----BEGIN PGP SIGNED MESSAGE-----")
    assert "BEGIN PGP PUBLIC KEY BLOCK" in (repo / aptrepo.KEY_NAME).read_text()
    assert (tmp_path / f"www/pip/nixl_cu13-{PINS['nixl_version']}-py3-none-any.whl").is_file()
    for path in ("ubuntu2204", "ubuntu2404"):  # NVIDIA's Ubuntu paths beside it, signed by the same key
        ubuntu = tmp_path / "www" / path / "x86_64"
        index = (ubuntu / "Packages").read_text()
        assert "Package: nvidia-driver-580-open\nVersion: 580.95.05-0ubuntu1" in index
        assert "Package: nvidia-modprobe\nVersion: 590.48.01-0ubuntu1" in index
        assert "Package: nvidia-open\n" not in index and "Package: libcuda1\n" not in index
        assert (ubuntu / "InRelease").read_text().startswith("-----BEGIN PGP SIGNED MESSAGE-----")
        assert (ubuntu / aptrepo.KEY_NAME).read_text() == (repo / aptrepo.KEY_NAME).read_text()


SPEC = HostSpec(gpu_count=8)
GPU = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 12.0, 580.95.05"


def test_gpu_problems_name_the_host_and_the_difference() -> None:
    assert c.gpu_problems("h", c.parse_smi("\n".join([GPU] * 8)), SPEC) == []
    assert c.gpu_problems("h", c.parse_smi("\n".join([GPU] * 7)), SPEC) == [
        "h: nvidia-smi lists 7 GPUs, expected 8 (pdfleet_cluster.hosts.h.gpu_count)"]
    odd = c.parse_smi(GPU.replace("12.0", "9.0"))
    assert "h: GPU 0 has compute capability 9.0, expected 12.0" in c.gpu_problems("h", odd, SPEC)


def test_holds_and_versions() -> None:
    lines = ["hold installed nvidia-smi 580.95.05-1", "install installed libcuda1 580.95.05-1",
             "hold installed nvidia-modprobe 590.48.01-1", "unknown not-installed nvidia-foo 1"]
    assert c.hold_problems("h", lines, "580.95.05") == [
        "h: package libcuda1 580.95.05-1 is not held (dpkg selection 'install'); fix: apt-mark hold libcuda1, "
        "or rerun provision.yml",
        "h: package nvidia-modprobe is at 590.48.01-1, not the pinned 580.95.05"]


def test_required_transports_are_planned_fields() -> None:
    # single-host PD: concrete UCX_TLS words (no aliases like sm, no auxiliary-only words) plus cuda_ipc
    inv = load_inventory(EXAMPLES / "pd-4p4d")
    cluster = copy.deepcopy(inv.shared_var("pdfleet_cluster"))
    cluster["nixl"]["ucx_tls"] = "tcp,sm,ud_verbs:aux"
    plan = build_plan(cluster, inv.hosts, supported_patches())
    tls, devices = c.required_transports(plan.hosts["gpu01"])
    assert tls == {"tcp", "cuda_ipc"} and devices == set()
    # prefill and decode on different hosts: no cuda_ipc; the RDMA device is required
    multi = plan_inventory(EXAMPLES / "pd-multinode")
    tls, devices = c.required_transports(multi.hosts["gpu-decode01"])
    assert tls == {"cuda_copy", "tcp"} and devices == {"mlx5_0:1"}
    # no PD worker, no UCX needs
    assert c.required_transports(plan_inventory(EXAMPLES / "mono-tp8").hosts["gpu01"]) == (set(), set())


def test_nvcc_release() -> None:
    assert c.nvcc_release("Cuda compilation tools, release 13.0, V13.0.2") == "13.0"
