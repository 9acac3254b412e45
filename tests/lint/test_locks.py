"""Hash locks of the venvs pdfleet installs from the registry (tests/lint/locks.py): the shipped lock is current with
its pins and hashes every requirement; a lock holds a python_version marker where the supported distributions' Pythons
resolve differently and every wheel hash each takes; a pin changed without a new lock is named with the fix."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import locks
import pytest
import yaml
from ansible_plugins.probes import load_common
from pdfleet.versions import ROUTER_RELEASES

# A requirement line as the roles' probes read it on the host (a line they cannot read would go unchecked there).
REQUIREMENT = load_common().LOCK_LINE


def _requirements(text: str) -> dict[str, list[str]]:
    """name==version[ ; marker] -> its hashes, from a lock's text (names in their canonical form)."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if m := REQUIREMENT.match(line):
            assert re.fullmatch(r"[a-z0-9-]+", m.group(1)), f"not a canonical name: {line!r}"
            current = line.rstrip(" \\")
            out[current] = []
        else:
            m = re.fullmatch(r"    --hash=sha256:([0-9a-f]{64})( \\)?", line)
            assert m and current, f"not a lock line: {line!r}"
            out[current].append(m.group(1))
    return out


ALL_LOCKS = {**locks.LOCKS, **locks.service_locks()}


@pytest.mark.parametrize("name", sorted(ALL_LOCKS))
def test_the_shipped_lock_is_current_and_hashes_every_requirement(name: str) -> None:
    spec = ALL_LOCKS[name]
    assert locks.check(spec) == ""
    reqs = _requirements(spec.path.read_text())
    assert reqs and all(reqs.values()), "a requirement without a hash"
    names = {r.split("==")[0] for r in reqs}
    for pin in locks.pins_of(spec):  # every top-level pin at its version, whatever the Python
        assert any(r.split(" ;")[0] == pin.lower().replace("_", "-") for r in reqs), pin
    assert len(names) > len(locks.pins_of(spec)), "the transitive dependencies are locked too"


def _hash(python: str) -> str:
    return python.replace(".", "").ljust(64, "a")  # a different wheel per Python


def _fake(pins: Sequence[str], target: locks.Target) -> locks.Resolved:
    out = {"a": ("1.0", _hash(target.python)), "b": ("2.0", "b" * 64)}
    if target.python == "3.10":
        out["backport"] = ("0.1", "c" * 64)  # only the oldest Python needs it
        out["b"] = ("1.9", "d" * 64)  # its newest release dropped 3.10
    return out


def _spec(tmp_path: Path, pins: list[str]) -> locks.LockSpec:
    defaults = tmp_path / "defaults.yml"
    defaults.write_text(yaml.safe_dump({"pins": pins}))
    return replace(locks.LOCKS["watchdog"], defaults=defaults, key="pins", path=tmp_path / "requirements.lock",
                   command="test")


def test_a_lock_marks_what_differs_by_python_and_keeps_every_hash(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(tmp_path, ["b==2.0", "a==1.0"])
    monkeypatch.setitem(locks.LOCKS, "test", spec)
    text = locks.make(spec, resolve=_fake, log=lambda _m: None)
    reqs = _requirements(text)
    pythons = sorted({t.python for t in locks.targets()})
    assert len(pythons) > 1 and "3.10" in pythons
    assert sorted(reqs["a==1.0"]) == sorted(_hash(p) for p in pythons)  # one hash per wheel taken
    assert reqs['backport==0.1 ; python_version == "3.10"'] == ["c" * 64]
    assert reqs['b==1.9 ; python_version == "3.10"'] == ["d" * 64]
    newer = " or ".join(f'python_version == "{p}"' for p in pythons if p != "3.10")
    assert reqs[f"b==2.0 ; {newer}"] == ["b" * 64]
    assert locks.lock_pins(text) == ["a==1.0", "b==2.0"]
    assert locks.make(spec, resolve=_fake, log=lambda _m: None) == text  # byte-stable


def test_a_pin_changed_without_a_new_lock_is_named_with_the_fix(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(tmp_path, ["a==1.0"])
    monkeypatch.setitem(locks.LOCKS, "test", spec)
    assert "locks.py test" in locks.check(spec)  # no lock yet
    spec.path.write_text(locks.make(spec, resolve=_fake, log=lambda _m: None))
    assert locks.check(spec) == ""
    (tmp_path / "defaults.yml").write_text(yaml.safe_dump({"pins": ["a==1.1"]}))
    problem = locks.check(spec)
    assert "['a==1.0']" in problem and "['a==1.1']" in problem and "locks.py test" in problem


def test_the_platform_tags_stop_at_the_distributions_glibc() -> None:
    tags = locks.Target("ubuntu-jammy", "3.10", "2.35").platforms()
    assert tags[0] == "manylinux_2_35_x86_64" and "manylinux_2_36_x86_64" not in tags
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "manylinux_2_17_x86_64"} <= set(tags)


def test_each_gateway_lock_is_named_after_the_release_it_locks_and_the_planned_one_has_one() -> None:
    files = sorted(locks.GATEWAY_LOCKS.glob("*.lock"))
    assert {f.name for f in files} >= {f"{package}-{release}.lock" for package, release in ROUTER_RELEASES.items()}
    for path in files:  # the sglang role picks a lock by its name: <package>-<version>.lock
        made_from = locks.lock_pins(path.read_text())
        assert made_from is not None and len(made_from) == 1, path
        assert locks.gateway_spec(made_from[0]).path == path, (path, made_from)
    assert locks.LOCKS["gateway"].path.is_file()  # constants.yml's router pin


def test_a_gateway_lock_of_another_release_is_made_by_its_pin_and_a_bad_pin_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(locks, "GATEWAY_LOCKS", tmp_path / "gateway")
    monkeypatch.setattr(locks, "make", lambda spec, log: locks.render(spec, locks.pins_of(spec), {
        t: _fake(spec.pins, t) for t in locks.targets()}))
    assert locks.main(["gateway", "--pin", "smg==9.9.9"]) == 0
    text = (tmp_path / "gateway" / "smg-9.9.9.lock").read_text()
    assert locks.lock_pins(text) == ["smg==9.9.9"] and "locks.py gateway --pin smg==9.9.9`" in text
    for bad in ("smg", "smg==", "../x==1"):
        assert locks.main(["gateway", "--pin", bad]) == 2
        assert "a gateway pin is name==version" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        locks.main(["watchdog", "--pin", "smg==1.0"])


def test_every_sglang_release_has_a_service_lock_for_the_distributions_that_install_it() -> None:
    """The sglang role installs the planned release's files/service/sglang-<version>.lock (pypi mode): one per
    release with a patch manifest, made with the NIXL pin, for exactly the distributions whose Python has the pin's
    wheels (0.5.23 has none for Ubuntu 22.04's 3.10: a marker-free lock of 3.11 and 3.12)."""
    from pdfleet.patch.manifest import supported_versions
    from pdfleet.versions import PINS

    specs = locks.service_locks()
    assert sorted(specs) == sorted(f"service-{v}" for v in supported_versions())
    assert {p.name for p in locks.SERVICE_LOCKS.glob("*.lock")} == {s.path.name for s in specs.values()}
    for version in supported_versions():
        spec = specs[f"service-{version}"]
        assert spec.path.name == f"sglang-{version}.lock"
        assert locks.lock_pins(spec.path.read_text()) == [f"nixl=={PINS['nixl_version']}", f"sglang=={version}"]
    assert "ubuntu-jammy" not in specs["service-0.5.23"].distributions
    assert "ubuntu-jammy" in specs["service-0.5.15.post1"].distributions
    text = specs["service-0.5.23"].path.read_text()
    assert 'python_version == "3.10"' not in text and "ubuntu-jammy" not in text


def test_a_service_lock_is_made_by_its_pin_and_a_bad_pin_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(locks, "SERVICE_LOCKS", tmp_path / "service")
    made: list[tuple[str, ...]] = []

    def fake_make(spec: locks.LockSpec, log: object) -> str:
        made.append(spec.distributions)
        return locks.render(spec, locks.pins_of(spec), {t: _fake(spec.pins, t) for t in locks.targets()
                                                        if t.name in spec.distributions})

    monkeypatch.setattr(locks, "make", fake_make)
    assert locks.main(["service", "--pin", "sglang==0.5.23"]) == 0
    text = (tmp_path / "service" / "sglang-0.5.23.lock").read_text()
    assert "locks.py service --pin sglang==0.5.23`" in text and made == [("debian-bookworm", "ubuntu-noble")]
    for bad, says in (("sglang", "a service pin is sglang==VERSION"), ("smg==1.13.0", "a service pin is"),
                      ("sglang==9.9.9", "SGLang 9.9.9 has no manifest")):
        assert locks.main(["service", "--pin", bad]) == 2
        assert says in capsys.readouterr().err
    with pytest.raises(SystemExit):
        locks.main(["service"])  # the release is required


def test_a_package_is_locked_with_the_extras_its_dependants_ask_of_it() -> None:
    """pip's report names only the extras a user asked for; a dependant's `cuda-tile[tileiras]` must be pinned with
    its extras too, or pip's hash-checking mode refuses it ("must have their versions pinned with =="). Extras
    count where the requirement applies on the target: its marker, under the extras asked of the dependant."""
    def item(name: str, requires: list[str], requested: list[str] | None = None) -> dict:
        return {"metadata": {"name": name, "version": "1.0", "requires_dist": requires},
                **({"requested_extras": requested} if requested else {})}

    items = [item("flashinfer_python", ["cuda-tile[tileiras]>=1", "numpy"]),
             item("cuda-tile", ["nvidia-tileiras; extra == 'tileiras'", "extra-lib[fast]; extra == 'tileiras'"]),
             item("numpy", ["old[x]; python_version < '3.11'"]),
             item("extra-lib", []), item("old", []), item("nvidia-tileiras", []),
             item("sglang", ["outlines[cli]; extra == 'all'"], requested=["Runtime_Common"]), item("outlines", [])]
    jammy, noble = (next(t for t in locks.targets() if t.name == n) for n in ("ubuntu-jammy", "ubuntu-noble"))
    assert locks.asked_extras(items, noble) == {"cuda-tile": {"tileiras"}, "extra-lib": {"fast"},
                                                "sglang": {"runtime-common"}}
    assert locks.asked_extras(items, jammy)["old"] == {"x"}  # numpy asks it on 3.10 only
