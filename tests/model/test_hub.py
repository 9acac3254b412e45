"""The model role's hub download, for real: the pinned `hf download` against a local hub endpoint
(tests/model/hubserver.py on loopback), the role on localhost (connection: local) writing into a tmp dir.

The repository is laid out like the model's (config, tokenizer files, safetensors shards and their index); the
role compares the copy with a pdfleet manifest built from it. Proved here: the first download is byte-identical;
a re-run asks the hub nothing (the server's request log); a connection dropped mid-file is resumed with a Range
request; a run stopped mid-file is completed by the next one, which fetches only what is missing; a wrong token
(401) and a missing revision (404) fail naming the host, the endpoint, the repo@revision and the fix, also when an
earlier partial copy is there (where `hf download` itself returns 0); a manifest mismatch is refused; the token is
in no output (-vvvv) and on no command line while the download runs (`ps`), and its file is gone after.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet import weights as mm
from pdfleet.paths import REPO_ROOT
from role_inputs import plan_inputs

from .hfcli import hf_cli, pinned_hub_requirements, sim_inventory_sglang
from .hubserver import HubRepo, HubServer, serve
from .test_role import BIN, GROUP, OWNER, PLAYBOOK

REPO_ID = "deepseek-ai/DeepSeek-V4-Flash"
TOKEN = "hf_pdfleetTEST_secret_0123456789abcdef"
STANDIN = REPO_ROOT / "ansible" / "roles" / "model" / "files" / "standin"
BIG = "model-00002-of-00003.safetensors"  # over huggingface_hub's 10 MiB download chunk: a drop can resume
MIB = 1024 * 1024
# The default suite runs the pin of the sim inventory's SGLang version; the others run in the long tier.
PINS = [pytest.param(req, id=req, marks=[] if v == sim_inventory_sglang() else [pytest.mark.long])
        for v, req in sorted(pinned_hub_requirements().items())]


def _repo_files(root: Path) -> None:
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(STANDIN / f, root / f)
    sizes = {"model-00001-of-00003.safetensors": 300_000, BIG: 12 * MIB, "model-00003-of-00003.safetensors": 70_000}
    weight_map = {}
    for i, (name, size) in enumerate(sizes.items()):
        (root / name).write_bytes(os.urandom(size))
        weight_map[f"model.layers.{i}.mlp.weight"] = name
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}, indent=1) + "\n")


@pytest.fixture(scope="module", params=PINS)
def hf(request: pytest.FixtureRequest) -> Path:
    return hf_cli(request.param)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    root = tmp_path_factory.mktemp("hubrepo")
    _repo_files(root)
    with serve(HubRepo(root, REPO_ID, TOKEN)) as server:
        yield server


@pytest.fixture(scope="module")
def manifest(hub: HubServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pdfleet manifest of the repository (made where a mirror would be: outside the repository)."""
    return mm.write(tmp_path_factory.mktemp("manifest"), mm.build(hub.repo.root))


class Run:
    def __init__(self, rc: int, changed: int, out: str) -> None:
        self.rc, self.changed, self.out = rc, changed, out


def run_role(hf: Path, hub: HubServer, dest: Path, tmp: Path, *args: str, token: str = TOKEN,
             **extra: object) -> Run:
    """The role with model_source=hub; the token goes in an extra-vars file (on the command line it would be
    in `ps`, here the controller is the host). Asserts the token is in no output."""
    evars = {**plan_inputs("model"), "ansible_python_interpreter": sys.executable, "model_path": str(dest),
             "model_owner": OWNER,
             "model_group": GROUP, "model_source": "hub", "model_hub_repo": REPO_ID, "model_hf_cli": str(hf),
             "model_hub_endpoint": hub.url, "model_hf_token": token, "model_hub_poll_s": 1,
             "model_hub_revision": "main",  # the test hub's branch (the examples' plan pins a commit it lacks)
             **extra}
    secrets = tmp / "secrets.json"
    secrets.write_text(json.dumps(evars))
    secrets.chmod(0o600)
    cmd = [str(BIN / "ansible-playbook"), str(PLAYBOOK), "-i", "localhost,", "-e", f"@{secrets}", *args]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0"}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False, env=env)
    secrets.unlink()
    out = proc.stdout + proc.stderr
    assert token not in out, "the token appears in the playbook output"
    m = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", out)
    return Run(proc.returncode, int(m.group(1)) if m else -1, out)


def _same_as_repo(hub: HubServer, dest: Path) -> None:
    for rel, src in hub.repo.files().items():
        assert filecmp.cmp(src, dest / rel, shallow=False), f"{rel} differs from the hub's"


def _private_dirs() -> set[Path]:
    return set(Path("/tmp").glob("*.pdfleet-hub"))


@pytest.fixture(scope="module")
def first(hf: Path, hub: HubServer, manifest: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run, str]:
    """The first download, at -vvvv; while it runs (the server holds the big shard) the test reads `ps`."""
    tmp = tmp_path_factory.mktemp("first")
    dest = tmp / "models" / "M"
    before = _private_dirs()
    hub.clear_log()
    hold = hub.hold(BIG, after=MIB)
    seen: dict[str, object] = {}

    def look() -> None:
        if hold.arrived.wait(300):
            ps = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True, check=True).stdout
            seen["ps"] = ps
            # The CLI's own environment (readable by its user and root only): the token file's path, not the token.
            pids = [line.split()[0] for line in ps.splitlines() if " download " + REPO_ID in line]
            seen["environ"] = "".join(Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
                                      for pid in pids)
            dirs = _private_dirs() - before
            seen["dirs"] = {d: (d.stat().st_mode & 0o777, (d / "token").stat().st_mode & 0o777) for d in dirs}
        hold.release.set()

    t = threading.Thread(target=look)
    t.start()
    run = run_role(hf, hub, dest, tmp, "-vvvv", model_manifest_file=str(manifest))
    t.join()
    assert run.rc == 0, run.out[-5000:]
    assert _private_dirs() - before == set(), "the private token directory was not removed"
    dirs = {str(k): v for k, v in seen.get("dirs", {}).items()}  # type: ignore[attr-defined]
    return dest, run, json.dumps({"ps": seen.get("ps", ""), "environ": seen.get("environ", ""), "dirs": dirs})


def test_first_download_is_byte_identical(hub: HubServer, first: tuple[Path, Run, str]) -> None:
    dest, run, _ = first
    assert run.changed > 0
    _same_as_repo(hub, dest)
    assert mm.check(dest, full=True).ok
    assert (dest / ".pdfleet-hub-complete").read_text() == f"{REPO_ID}@main\n"


def test_token_is_on_no_command_line_and_its_file_is_private(first: tuple[Path, Run, str]) -> None:
    seen = json.loads(first[2])
    assert " download " + REPO_ID in seen["ps"], "ps was not read while hf download ran"
    assert TOKEN not in seen["ps"]
    assert "HF_TOKEN_PATH=" in seen["environ"] and TOKEN not in seen["environ"]
    # At -vvvv the job's environment is shown (it is on the command line that starts it): paths only.
    assert "HF_TOKEN_PATH=" in first[1].out
    assert list(seen["dirs"].values()) == [[0o700, 0o600]]


def test_rerun_asks_the_hub_nothing(hf: Path, hub: HubServer, manifest: Path, first: tuple[Path, Run, str],
                                    tmp_path: Path) -> None:
    hub.clear_log()
    run = run_role(hf, hub, first[0], tmp_path, model_manifest_file=str(manifest))
    assert (run.rc, run.changed) == (0, 0), run.out[-3000:]
    assert "nothing to stage" in run.out
    assert hub.requests == []


def test_without_manifest_a_rerun_asks_nothing_either(hf: Path, hub: HubServer, tmp_path: Path) -> None:
    dest = tmp_path / "M"
    assert run_role(hf, hub, dest, tmp_path).rc == 0
    _same_as_repo(hub, dest)
    hub.clear_log()
    run = run_role(hf, hub, dest, tmp_path)
    assert (run.rc, run.changed) == (0, 0), run.out[-3000:]
    assert hub.requests == []


def test_dropped_connection_is_resumed_with_a_range_request(hf: Path, hub: HubServer, manifest: Path,
                                                            tmp_path: Path) -> None:
    dest = tmp_path / "M"
    hub.clear_log()
    hub.drop(BIG, after=11 * MIB)
    run = run_role(hf, hub, dest, tmp_path, model_manifest_file=str(manifest))
    assert run.rc == 0, run.out[-5000:]
    gets = hub.gets(BIG)
    assert len(gets) == 2, gets
    assert gets[0].range is None and gets[1].range is not None and re.fullmatch(r"bytes=[1-9]\d*-", gets[1].range)
    _same_as_repo(hub, dest)


def test_stopped_download_is_completed_by_the_next_run(hf: Path, hub: HubServer, manifest: Path,
                                                       tmp_path: Path) -> None:
    dest = tmp_path / "M"
    hold = hub.hold(BIG, after=MIB)
    try:
        run = run_role(hf, hub, dest, tmp_path, model_manifest_file=str(manifest), model_hub_timeout_s=8)
    finally:
        hold.release.set()
    assert run.rc != 0
    assert "did not finish within model_hub_timeout_s=8 s" in run.out
    assert f"{REPO_ID}@main from {hub.url}" in run.out
    assert not (dest / BIG).exists() and not (dest / ".pdfleet-hub-complete").exists()
    missing = {rel for rel in hub.repo.files() if not (dest / rel).is_file()}
    hub.clear_log()
    run = run_role(hf, hub, dest, tmp_path, model_manifest_file=str(manifest))
    assert run.rc == 0, run.out[-5000:]
    assert {g.path.rsplit("/", 1)[1] for g in hub.gets()} == missing  # complete files are not fetched again
    _same_as_repo(hub, dest)


def test_wrong_token_fails_clearly(hf: Path, hub: HubServer, first: tuple[Path, Run, str], tmp_path: Path) -> None:
    bad = "hf_WRONG_token_must_not_leak_42"
    fresh = run_role(hf, hub, tmp_path / "fresh", tmp_path, "-vvvv", token=bad)
    # A partial copy from an earlier run: `hf download` returns 0 when it cannot ask the hub; the role must not.
    partial = tmp_path / "partial"
    shutil.copytree(first[0], partial)
    (partial / BIG).unlink()
    (partial / ".pdfleet-hub-complete").unlink()
    again = run_role(hf, hub, partial, tmp_path, token=bad)
    for run in (fresh, again):
        assert run.rc != 0
        assert bad not in run.out
        assert f"host localhost: {hub.url} refused the token for {REPO_ID}@main (401 Unauthorized)" in run.out
        assert "Fix: put a valid token with read access to " + REPO_ID + " in model_hf_token" in run.out
    assert not (partial / ".pdfleet-hub-complete").exists()


def test_missing_revision_fails_clearly(hf: Path, hub: HubServer, tmp_path: Path) -> None:
    run = run_role(hf, hub, tmp_path / "M", tmp_path, model_hub_revision="v9-missing")
    assert run.rc != 0
    assert f"host localhost: {hub.url} has no revision v9-missing of {REPO_ID} (404 Revision Not Found)" in run.out
    assert "Fix: set model_hub_revision" in run.out


def test_manifest_mismatch_is_refused(hf: Path, hub: HubServer, tmp_path: Path) -> None:
    # A manifest of another revision: one shard of the same size, other bytes.
    other = tmp_path / "other"
    shutil.copytree(hub.repo.root, other)
    shard = other / "model-00003-of-00003.safetensors"
    shard.write_bytes(bytes(b ^ 0xFF for b in shard.read_bytes()))
    wrong = mm.write(tmp_path, mm.build(other))
    dest = tmp_path / "M"
    run = run_role(hf, hub, dest, tmp_path, model_manifest_file=str(wrong), model_verify_checksums=True)
    assert run.rc != 0
    assert f"host localhost: {dest}/model-00003-of-00003.safetensors has sha256" in run.out
    assert f"Fix: {REPO_ID}@main on {hub.url} is not what the manifest {wrong} describes" in run.out
    assert not (dest / ".pdfleet-hub-complete").exists()
