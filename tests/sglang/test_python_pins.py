"""Pins against the host's Python: the per-pin wheel facts agree with the pinned wheels, and the decision refuses a
host whose Python or glibc cannot install the pin, naming the host, its Python, the pin and the pins that would."""

from __future__ import annotations

import email.parser
import re
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from pdfleet.patch import manifest as patches
from pdfleet.patch.errors import PatchError
from pdfleet.patch.wheels import (
    host_problems,
    load_pin_wheels,
    registry_wheels,
    scope,
    shared_wheels,
    summarize,
    wheel_tags,
)
from pdfleet.paths import REPO_ROOT
from pdfleet.versions import CONSTANTS, PINS

DISTRIBUTIONS: dict[str, dict[str, str]] = CONSTANTS["distribution_pythons"]


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


def _pinned(requires: list[str], name: str) -> str:
    """The == version the wheel's Requires-Dist gives `name` (unconditional requirements only)."""
    pattern = re.compile(rf"^{re.escape(name)}\s*==\s*([^;\s]+)\s*$", re.IGNORECASE)
    found = [m[1] for r in requires if (m := pattern.match(r.replace("_", "-")))]
    assert len(found) == 1, f"{name} is pinned {len(found)} times in {requires}"
    return found[0]


def test_each_pin_lists_the_wheels_its_sglang_wheel_requires(wheels: dict[str, Path]) -> None:
    for version, wheel in wheels.items():
        pin = load_pin_wheels(version)
        by_name = {p.name: p for p in pin.packages}
        meta = _metadata(wheel)
        requires = meta.get_all("Requires-Dist") or []
        # the versions of the packages the pin installs with it are the wheel's own pins
        assert by_name["torch"].version == _pinned(requires, "torch"), version
        assert by_name["sglang-kernel"].version == _pinned(requires, "sglang-kernel"), version
        # the cached wheel itself is one of the wheels the facts list, and the Pythons respect Requires-Python
        pythons, glibc = wheel_tags(wheel.name) or (set(), "")
        assert pythons <= set(by_name["sglang"].pythons), (wheel.name, by_name["sglang"])
        assert glibc == by_name["sglang"].glibc, (wheel.name, by_name["sglang"])
        floor = re.fullmatch(r">=\s*(3\.\d+)", meta["Requires-Python"].strip())
        assert floor, meta["Requires-Python"]
        lowest = min(by_name["sglang"].pythons, key=lambda p: int(p.split(".")[1]))
        assert lowest == floor[1], f"{version}: Requires-Python {floor[1]} but the oldest wheel is for {lowest}"


def test_the_shared_wheels_are_the_shared_pins() -> None:
    by_name = {p.name: p for p in shared_wheels()}
    assert by_name[PINS["sglang_router_package"]].version == PINS["sglang_router_version"]
    assert {by_name[n].version for n in ("nixl", "nixl-cu12", "nixl-cu13")} == {PINS["nixl_version"]}


def test_a_changed_pin_without_its_wheel_facts_is_refused(tmp_path: Path) -> None:
    for version in patches.supported_versions():
        (tmp_path / version).mkdir()
        for f in (patches.default_patches_dir() / version).iterdir():
            (tmp_path / version / f.name).write_bytes(f.read_bytes())
    manifest = tmp_path / "0.5.23" / "manifest.yml"
    data = yaml.safe_load(manifest.read_text())
    del data["wheels"]
    manifest.write_text(yaml.safe_dump(data))
    with pytest.raises(PatchError, match=r"0\.5\.23/manifest\.yml wheels: expected a mapping"):
        load_pin_wheels("0.5.23", tmp_path)


def test_wheel_file_names_give_the_pythons_and_the_glibc_floor() -> None:
    assert wheel_tags("sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl") == ({"3.12"}, "2.34")
    router = "sglang_router-0.3.2-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert wheel_tags(router) == ({"any"}, "2.17")
    assert wheel_tags("sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl") == ({"any"}, "2.17")
    assert wheel_tags("nixl-1.5.2-py3-none-any.whl") == ({"any"}, "")
    assert wheel_tags("torch-2.14.1-cp312-cp312-manylinux_2_28_aarch64.whl") is None
    facts = summarize("sglang", "0.5.23", ["sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
                                            "sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl",
                                            "sglang-0.5.23-cp312-cp312-manylinux_2_34_aarch64.whl"])
    assert (facts.pythons, facts.glibc) == (("3.11", "3.12"), "2.34")
    assert summarize("nixl-cu13", "1.5.2", []).pythons == ()


def test_distributions_are_the_driver_roles_platforms() -> None:
    meta = yaml.safe_load((REPO_ROOT / "ansible/roles/nvidia_driver/meta/main.yml").read_text())
    platforms = {f"{p['name'].lower()}-{v}" for p in meta["galaxy_info"]["platforms"] for v in p["versions"]}
    assert set(DISTRIBUTIONS) == platforms


@pytest.mark.parametrize(("distribution", "version", "installs"), [
    ("debian-bookworm", "0.5.15.post1", True), ("debian-bookworm", "0.5.23", True),
    ("ubuntu-jammy", "0.5.15.post1", True), ("ubuntu-jammy", "0.5.23", False),
    ("ubuntu-noble", "0.5.15.post1", True), ("ubuntu-noble", "0.5.23", True),
])
def test_each_supported_distribution_against_each_pin(distribution: str, version: str, installs: bool) -> None:
    problems = host_problems("gpu-a", DISTRIBUTIONS[distribution], version, "pypi")
    assert (problems == []) is installs, problems


def test_jammys_python_is_refused_for_0_5_23_naming_host_python_pin_and_the_pin_that_works() -> None:
    look = {"python": "3.10", "python_from": "sglang_python python3", "glibc": "2.35"}
    [message] = host_problems("gpu-a", look, "0.5.23", "pypi")
    assert message.startswith("gpu-a: Python 3.10 (sglang_python python3, glibc 2.35) cannot install SGLang 0.5.23")
    assert "sglang==0.5.23 has wheels for Python 3.11, 3.12, 3.13 only" in message
    assert "Pins that would install there: 0.5.15.post1 (pdfleet_cluster.sglang.version)" in message


def test_an_old_glibc_is_refused_with_the_manylinux_floor() -> None:
    [message] = host_problems("gpu-a", {"python": "3.11", "glibc": "2.31"}, "0.5.15.post1", "pypi")
    assert "sglang==0.5.15.post1 needs glibc >= 2.34 (manylinux_2_34)" in message
    assert "No supported pin installs there" in message


def test_an_interpreter_that_does_not_answer_is_refused() -> None:
    look = {"python": "", "python_from": "sglang_python /opt/py/bin/python3", "python_error": "No such file"}
    [message] = host_problems("gpu-a", look, "0.5.23", "pypi")
    assert "gpu-a: could not tell the Python version of sglang_python /opt/py/bin/python3 (No such file)" in message


def test_sim_mode_needs_the_runtimes_python_and_the_sglang_wheel_only() -> None:
    ok = {"python": "3.11", "glibc": "2.36", "runtime_python": "3.11"}
    assert host_problems("node1", ok, "0.5.23", "sim") == []
    [message] = host_problems("node1", dict(ok, python="3.12"), "0.5.23", "sim")
    assert "the prepared CPU runtime (sglang_runtime_path) is built for Python 3.11" in message
    # sim installs SGLang without dependencies: torch's and the kernel's wheels do not count there
    router = PINS["sglang_router_package"]
    assert {p.name for p in scope(load_pin_wheels("0.5.23"), "sim", False).packages} == {"sglang", router}


def test_nixl_counts_where_the_nixl_role_installs_from_the_registry() -> None:
    look = {"python": "3.11", "glibc": "2.36"}
    assert host_problems("gpu-a", look, "0.5.23", "pypi") == []
    assert host_problems("gpu-a", look, "0.5.23", "pypi", with_nixl=True) == []
    # jammy's Python 3.10 has NIXL's wheels but not sglang 0.5.23's: only sglang is named
    [message] = host_problems("gpu-a", {"python": "3.10", "glibc": "2.35"}, "0.5.23", "pypi", with_nixl=True)
    assert "sglang==0.5.23 has wheels for Python 3.11, 3.12, 3.13 only" in message
    assert "nixl-cu" not in message and "nixl==" not in message


def _fake_pip(output: str) -> tuple[str, ...]:
    """A stand-in for `python -m pip` that prints `output` whatever it is asked (its arguments are ignored)."""
    return (sys.executable, "-c", f"print({output!r})", "--")


def test_the_registry_listing_keeps_the_releases_wheels_and_fails_when_nothing_was_listed() -> None:
    out = "\n".join([
        "  Skipping link: none of the wheel's tags (cp312-cp312-manylinux_2_28_x86_64) are compatible: "
        "https://h/p/nixl_cu13-1.5.1-cp312-cp312-manylinux_2_28_x86_64.whl (from https://h/simple/nixl-cu13/)",
        "  Skipping link: none of the wheel's tags (cp312-cp312-manylinux_2_28_x86_64) are compatible: "
        "https://h/p/nixl_cu13-1.5.2-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=00 (from https://h/simple/)",
        "  Skipping link: not a file: https://h/p/torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl (from x)",
    ])
    assert registry_wheels("nixl-cu13", "1.5.2", _fake_pip(out)) == [
        "nixl_cu13-1.5.2-cp312-cp312-manylinux_2_28_x86_64.whl"]
    assert registry_wheels("nixl-cu13", "1.5.9", _fake_pip(out)) == []  # other releases listed: the index was read
    with pytest.raises(PatchError, match="pip listed no wheel of sglang at all; is the package index"):
        registry_wheels("sglang", "0.5.23", _fake_pip("ERROR: No matching distribution found for sglang==0.5.23"))
