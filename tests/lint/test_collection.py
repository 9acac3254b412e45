"""The Ansible half as the collection pdfleet.cluster (ansible/galaxy.yml): `ansible-galaxy collection build` makes
an artifact that ships exactly the collection's files (no tests, no caches), installs into a scratch path, and
runs the preflight play from there, outside the checkout (no ansible.cfg of ours), with the pdfleet package of
this environment; its plan is the one `pdfleet plan` prints for the same inventory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT

BIN = Path(sys.executable).parent
COLLECTION = REPO_ROOT / "ansible"
INVENTORY = REPO_ROOT / "inventory" / "examples" / "pd-4p4d"
# What ansible-galaxy writes into every artifact besides the collection's own files.
GENERATED = {"MANIFEST.json", "FILES.json"}
SOURCE_ONLY = {"galaxy.yml"}  # read by the build, carried into MANIFEST.json
# Never in the artifact: caches, and a tests/ tree (galaxy.yml's build_ignore) should the collection grow one.
NEVER_SHIPPED = ("__pycache__", ".pyc", ".pytest_cache", ".ruff_cache", "tests/")

# A user's playbook: the collection's preflight by its full name, then the plan it made, written down.
PLAYBOOK = """\
- name: Preflight, from the installed collection
  ansible.builtin.import_playbook: pdfleet.cluster.preflight

- name: Write the plan the preflight made
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Write the plan document
      ansible.builtin.copy:
        content: "{{ hostvars[groups['all'][0]]['pdfleet_plan'] | to_json }}"
        dest: "{{ playbook_dir }}/plan.json"
        mode: "0600"
"""


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("build")
    proc = _run([str(BIN / "ansible-galaxy"), "collection", "build", str(COLLECTION), "--output-path", str(out)],
                cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("pdfleet-cluster-*.tar.gz")
    return built


def _checkout_files() -> set[str]:
    """The collection's files in the checkout: tracked or new, not ignored (.gitignore keeps caches out)."""
    proc = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "."], cwd=COLLECTION)
    assert proc.returncode == 0, proc.stderr
    return {line for line in proc.stdout.splitlines() if (COLLECTION / line).is_file()}


def test_the_artifact_ships_the_collections_files_and_nothing_else(artifact: Path) -> None:
    with tarfile.open(artifact) as tar:
        files = {m.name for m in tar.getmembers() if m.isfile()}
        manifest = json.load(tar.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    assert not [name for name in files if any(bad in name for bad in NEVER_SHIPPED)]
    assert files - GENERATED == {name for name in _checkout_files() - SOURCE_ONLY if not name.startswith("tests/")}
    roles = {name.split("/")[1] for name in files if name.startswith("roles/")}
    assert roles == {p.name for p in (COLLECTION / "roles").iterdir() if p.is_dir()}
    info = manifest["collection_info"]
    assert (info["namespace"], info["name"]) == ("pdfleet", "cluster")


@pytest.fixture(scope="module")
def installed(artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The artifact installed into a scratch collections path."""
    scratch = tmp_path_factory.mktemp("collections")
    proc = _run([str(BIN / "ansible-galaxy"), "collection", "install", "-p", str(scratch), str(artifact)],
                cwd=scratch)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    collection = scratch / "ansible_collections" / "pdfleet" / "cluster"
    assert (collection / "playbooks" / "preflight.yml").is_file() and not collection.is_symlink()
    return scratch


def _outside(tmp_path: Path, installed: Path) -> tuple[Path, dict[str, str]]:
    """A working directory outside the checkout and the environment of a user who installed the collection: an
    ansible.cfg in the working directory is the one Ansible reads (never the checkout's, nor a user's)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = False\n")
    env = {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(installed),
           "ANSIBLE_CALLBACKS_ENABLED": "pdfleet.cluster.pdfleet_preload"}
    return work, env


def test_the_installed_collection_runs_the_preflight_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    work, env = _outside(tmp_path, installed)
    (work / "play.yml").write_text(PLAYBOOK)
    proc = _run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY),
                 "-e", f"ansible_python_interpreter={sys.executable}", "play.yml"], cwd=work, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "not found" not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr  # the callback's warning
    assert "failed=0" in proc.stdout

    planned = _run([str(BIN / "pdfleet"), "plan", "-i", str(INVENTORY), "--json"], cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert json.loads((work / "plan.json").read_text()) == json.loads(planned.stdout)


@pytest.mark.parametrize("playbook", sorted(p.stem for p in (COLLECTION / "playbooks").glob("*.yml")))
def test_each_playbook_of_the_installed_collection_resolves_its_roles_and_modules(playbook: str, installed: Path,
                                                                                  tmp_path: Path) -> None:
    """Outside the checkout only full names resolve: a role, module or task file named the short way fails."""
    work, env = _outside(tmp_path, installed)
    proc = _run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), "--syntax-check",
                 f"pdfleet.cluster.{playbook}"], cwd=work, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
