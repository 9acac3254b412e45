"""A throwaway simulated cluster for integration tests: a scratch copy of inventory/sim on its own bridge,
subnet and state directory (so it never touches a cluster a person started with `make site`), converged by
the real site.yml, and always torn down, also when a test fails. The default suite's one converged one-host sim
is tests/conftest.py's fixture `converged`."""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pdfleet.inventory import InventorySource
from pdfleet.paths import REPO_ROOT
from pdfleet.planner import ROUTER_KEY_ENV
from pdfleet.routerkey import find_key
from pdfleet_sim.testing.scratch import scratch_inventory

BIN = Path(sys.executable).parent
SITE = REPO_ROOT / "site.yml"
# The gateway's API key of each scratch cluster's router (router.api_key is on by default), by router URL: the
# tests' own requests to a router carry it (keyed_request), as every pdfleet command's do (pdfleet.routerkey).
ROUTER_KEYS: dict[str, str] = {}


def keyed_request(url: str, data: bytes | None = None, headers: dict[str, str] | None = None,
                  method: str | None = None) -> urllib.request.Request:
    """A request to ``url``, with the router's key when ``url`` is a known scratch cluster's router."""
    headers = dict(headers or {})
    key = next((k for router, k in ROUTER_KEYS.items() if url == router or url.startswith(router + "/")), None)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return urllib.request.Request(url, data=data, headers=headers, method=method)
TOOLS = ("systemd-nspawn", "mmdebstrap", "nft", "dpkg-deb", "gpg")


def skip_reason() -> str | None:
    """Why a scratch cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "the simulated cluster needs root (systemd-nspawn, bridges, nftables)"
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make test installs it: scripts/host-packages.sh)"
    return None


def recap(stdout: str, host: str) -> dict[str, int]:
    """The PLAY RECAP counters of one host."""
    for line in stdout.splitlines():
        if line.startswith(host + " ") and "ok=" in line:
            return {k: int(v) for k, v in (w.split("=") for w in line.split()[2:])}
    raise AssertionError(f"no PLAY RECAP line for {host}:\n{stdout[-3000:]}")


def wait_for(what: str, pred: Callable[[], Any], timeout: float, interval: float = 1.0) -> Any:
    """Poll ``pred`` until it returns something truthy (returned); AssertionError naming ``what`` and the last
    value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not within {timeout:g} s (last: {last})")


@dataclass
class ScratchCluster:
    inventory: Path
    state_dir: Path
    address: str
    router_url: str
    model: str
    reports_dir: Path
    # The Vault password file of an inventory whose secrets are vaulted (vault_the_key): every playbook and pdfleet
    # command on it gets --vault-password-file (vault_args), as an operator's would.
    vault_password_file: Path | None = None
    # The output of the cluster's first site.yml, for a test of what a first converge does (the shared sim's fixture
    # keeps it: tests/conftest.py).
    first_converge_stdout: str = ""

    def __post_init__(self) -> None:
        key = self.router_key
        if key:
            ROUTER_KEYS[self.router_url] = key

    @property
    def vault_args(self) -> tuple[str, ...]:
        return ("--vault-password-file", str(self.vault_password_file)) if self.vault_password_file else ()

    @property
    def source(self) -> InventorySource:
        """The inventory as pdfleet reads it (with the Vault password file, if any)."""
        files = (str(self.vault_password_file),) if self.vault_password_file else ()
        return InventorySource((self.inventory,), vault_password_files=files)

    @property
    def router_key(self) -> str | None:
        """The key the scratch inventory gives the router (its pdfleet_units_secrets, as every caller reads it)."""
        return find_key(None, self.source)

    def playbook(self, playbook: Path = SITE, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a playbook; the verification play runs one cascade cycle (default 2) to keep the suite short."""
        env = dict(os.environ, ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
        # A passing verification stores its benchmark as the baseline; runs of one test session on a loaded
        # machine must not be compared with each other (the comparison has its own unit tests).
        env["PDFLEET_BASELINE_FILE"] = str(self.reports_dir / f"baselines-{time.monotonic_ns()}.json")
        verify = json.dumps({"pdfleet_verify_args": ["--cycles", "1"],
                             "pdfleet_verify_reports_dir": str(self.reports_dir)})
        proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(playbook),
                               "-e", verify, *self.vault_args, *extra],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{playbook.name} failed (rc {proc.returncode}):\n{proc.stdout[-6000:]}\n"
                                 f"{proc.stderr}")
        return proc

    def ssh(self, command: str, timeout: float = 60, host: str = "node1") -> subprocess.CompletedProcess[str]:
        """Run `command` on one sim host (default node1, the one-host cluster's only host) as root."""
        return subprocess.run(["ssh", "-F", str(self.state_dir / "ssh_config"), host, command],
                              capture_output=True, text=True, timeout=timeout, check=False)

    def set_model(self, section: str, **values: object) -> None:
        """Change pdfleet_cluster.<section> in the scratch inventory (e.g. sglang apply_patch, cuda pins)."""
        path = self.inventory / "group_vars" / "all" / "cluster.yml"
        data = yaml.safe_load(path.read_text())
        data["pdfleet_cluster"].setdefault(section, {}).update(values)
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    @contextmanager
    def model_changed(self, section: str, **values: object) -> Iterator[None]:
        """set_model for the duration of a with block; then the scratch inventory's cluster.yml is put back byte
        for byte (a test that changes the shared sim must leave it as it found it: tests/conftest.py)."""
        path = self.inventory / "group_vars" / "all" / "cluster.yml"
        before = path.read_bytes()
        self.set_model(section, **values)
        try:
            yield
        finally:
            path.write_bytes(before)

    def chat(self, prompt: str, timeout: float = 30) -> dict:
        """One non-streaming chat completion through the router; raises on HTTP errors and time-outs."""
        body = json.dumps({"model": self.model, "max_tokens": 16,
                           "messages": [{"role": "user", "content": prompt}]}).encode()
        req = keyed_request(self.router_url + "/v1/chat/completions", data=body,
                            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            assert resp.status == 200
            return json.loads(resp.read())

    def health(self, url: str) -> int:
        """The status of GET url/health."""
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return resp.status

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.router_url + "/readiness", timeout=3) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(1)
        raise AssertionError(f"router {self.router_url} not ready within {timeout}s: {last}\n"
                             f"{self.router_diagnosis()}")

    def router_diagnosis(self) -> str:
        """What the router host says of the router unit (state, last journal lines, listening sockets): a failed
        wait would otherwise leave nothing to read once the scratch cluster is torn down."""
        model = yaml.safe_load((self.inventory / "group_vars" / "all" / "cluster.yml").read_text())
        host = str((model["pdfleet_cluster"].get("router") or {}).get("host") or "node1")
        try:
            proc = self.ssh("systemctl status --no-pager -n 0 pdfleet-router; "
                            "journalctl -u pdfleet-router --no-pager -n 60 -o short-precise | cut -c1-300; "
                            "ss -ltn", timeout=30, host=host)
        except subprocess.TimeoutExpired:
            return f"{host}: no answer over ssh within 30 s"
        return f"on {host}:\n{proc.stdout[-8000:]}{proc.stderr[-1000:]}"

    def latest_report(self) -> dict:
        """The newest verification report the final play of site.yml left."""
        reports = sorted(self.reports_dir.glob("verify-*.json"), key=lambda p: p.stat().st_mtime)
        assert reports, f"no verification report in {self.reports_dir}"
        return json.loads(reports[-1].read_text())

    def conformance(self, inventory: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "pdfleet"), "conformance", "-i", str(inventory or self.inventory)],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)


NET_LOCK_DIR = Path("/run/lock/pdfleet-test-nets")


@contextmanager
def claimed_net(lo: int = 80, hi: int = 99) -> Iterator[int]:
    """A subnet number in lo..hi that no other test run on this machine holds (an flock per number, kept until
    exit) and whose scratch bridge does not exist, so concurrent suites never share a bridge or addresses."""
    NET_LOCK_DIR.mkdir(parents=True, exist_ok=True)
    for net in range(lo, hi + 1):
        fd = os.open(NET_LOCK_DIR / f"{net}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if Path(f"/sys/class/net/pdfsc{net}").exists():  # left over by a killed run: not ours to reuse
            os.close(fd)
            continue
        try:
            yield net
        finally:
            os.close(fd)
        return
    raise RuntimeError(f"no free scratch subnet in 10.{lo}-{hi}.0.0/24: every one is held by another run or has "
                       "a leftover bridge (pdfleet sim down --state-dir ... removes it)")


def vault_the_key(inventory: Path, root: Path) -> Path:
    """Production-shaped secrets: the inventory's gateway key (the sim's generated one, in group_vars/all/sim.yml)
    replaced by a new one made the way the README says (`pdfleet keygen NAME | ansible-vault encrypt_string
    --stdin-name NAME`: never on a command line or in a plain file) in group_vars/all/vault.yml; the Vault password
    in root/vault-password (0600). Returns the password file."""
    password = root / "vault-password"
    fd = os.open(password, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(24) + "\n")
    sim_file = inventory / "group_vars" / "all" / "sim.yml"
    sim = yaml.safe_load(sim_file.read_text())
    sim.pop("pdfleet_units_secrets", None)
    sim_file.write_text(yaml.safe_dump(sim, sort_keys=False))
    keygen = subprocess.Popen([str(BIN / "pdfleet"), "keygen", ROUTER_KEY_ENV], stdout=subprocess.PIPE)
    vaulted = subprocess.run([str(BIN / "ansible-vault"), "encrypt_string", "--vault-password-file", str(password),
                              "--stdin-name", ROUTER_KEY_ENV], stdin=keygen.stdout, capture_output=True, text=True,
                             timeout=120, check=True).stdout
    assert keygen.wait(timeout=30) == 0 and vaulted.startswith(f"{ROUTER_KEY_ENV}: !vault |"), vaulted[:200]
    body = "".join(f"  {line}\n" for line in vaulted.splitlines())
    (inventory / "group_vars" / "all" / "vault.yml").write_text(
        f"---\n# The gateway key, Vault-encrypted (tests/simcluster.py vault_the_key)\npdfleet_units_secrets:\n{body}")
    return password


@contextmanager
def scratch_cluster(root: Path, net: int | None = None, source: Path | None = None,
                    vault: bool = False) -> Iterator[ScratchCluster]:
    """A scratch cluster (not yet converged) on 10.<net>.0.0/24, by default the first free subnet in 10.80-99;
    a copy of `source` (default inventory/sim), its key Vault-encrypted with ``vault`` (vault_the_key); torn down
    on exit, whatever happened."""
    if net is None:
        with claimed_net() as claimed, scratch_cluster(root, claimed, source, vault) as cluster:
            yield cluster
        return
    scratch = scratch_inventory(root, net, source) if source else scratch_inventory(root, net)
    password = vault_the_key(scratch.path, root) if vault else None
    vault_args = ["--vault-password-file", str(password)] if password else []
    plan = json.loads(subprocess.run([str(BIN / "pdfleet"), "plan", "-i", str(scratch.path), *vault_args, "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    cluster = ScratchCluster(scratch.path, scratch.state_dir, scratch.addresses["node1"], plan["router_url"],
                             plan["model"]["served_name"] or plan["model"]["name"], root / "reports", password)
    try:
        yield cluster
    finally:
        subprocess.run([str(BIN / "pdfleet"), "sim", "down", "--state-dir", str(scratch.state_dir)],
                       capture_output=True, text=True, timeout=300, check=False)
