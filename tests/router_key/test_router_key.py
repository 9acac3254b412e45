"""The router's API key without a sim (tests/sim/test_secrets.py runs the whole path on the converged sim):

- the router unit never puts the key on a command line (systemd would expand ${PDFLEET_ROUTER_API_KEY} into the
  argv `ps` shows): the planner's shim hands it to the router inside the process, and the running process's
  /proc/self/cmdline does not hold it; without the key the shim refuses to start an open router;
- `pdfleet verify` reads the key from a 0600 file (bare key, or secrets.env's line) or $PDFLEET_ROUTER_API_KEY,
  refuses a file others may read, sends it to the router's address only (plain requests and streams), and a
  refused listing (401) is named as a key problem, not "no worker listing";
- the launch check reads the same router arguments with or without the key.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pdfleet import routerkey
from pdfleet.launchcheck.check import _job_unit
from pdfleet.paths import REPO_ROOT
from pdfleet.planner import ROUTER_KEY_SHIM, Plan, Unit, build_plan
from pdfleet.verify import checks, client

KEY = "rk_unit_CANARY_4242"
SIM = yaml.safe_load((REPO_ROOT / "inventory/sim/group_vars/all/cluster.yml").read_text())["pdfleet_cluster"]
HOSTS = {"node1": "10.77.0.11"}


def _plan(api_key: bool) -> Plan:
    raw = copy.deepcopy(SIM)
    raw["router"]["api_key"] = api_key
    return build_plan(raw, HOSTS, {raw["sglang"]["version"]: raw["sglang"]["patch"]})


def _router(plan: Plan) -> Unit:
    return next(u for u in plan.units() if u.kind == "router")


def test_router_unit_keeps_the_key_off_its_command_line() -> None:
    with_key, without = _router(_plan(True)), _router(_plan(False))
    assert "$" not in with_key.exec_start_line and KEY not in with_key.exec_start_line
    assert "--api-key" not in with_key.exec_start  # added inside the process, from the environment
    assert with_key.exec_start[:3] == [without.exec_start[0], "-c", ROUTER_KEY_SHIM]
    assert with_key.exec_start[3:] == without.exec_start[2:]  # the module, then the same arguments
    assert without.exec_start[1:3] == ["-m", "smg.launch_router"]


def test_launch_check_reads_the_same_router_arguments_with_the_key() -> None:
    with_key, without = _plan(True), _plan(False)
    assert _job_unit(with_key, _router(with_key))["args"] == _job_unit(without, _router(without))["args"]


@pytest.fixture
def fake_router(tmp_path: Path) -> Path:
    """A module the shim runs as the router: prints its sys.argv and its process's command line."""
    (tmp_path / "fake_router.py").write_text(
        "import sys\nprint(repr(sys.argv[1:]))\nprint(open('/proc/self/cmdline').read().replace('\\0', ' '))\n")
    return tmp_path


def _shim(fake_router: Path, key: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != routerkey.ENV_NAME}
    env["PYTHONPATH"] = str(fake_router)
    if key is not None:
        env[routerkey.ENV_NAME] = key
    return subprocess.run([sys.executable, "-c", ROUTER_KEY_SHIM, "fake_router", "--port", "8000"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_shim_hands_the_key_to_the_router_inside_the_process(fake_router: Path) -> None:
    proc = _shim(fake_router, KEY)
    assert proc.returncode == 0, proc.stderr
    argv, cmdline = proc.stdout.splitlines()[:2]
    assert argv == repr(["--port", "8000", "--api-key", KEY])
    assert "fake_router --port 8000" in cmdline and KEY not in cmdline


def test_shim_refuses_to_start_an_open_router(fake_router: Path) -> None:
    proc = _shim(fake_router, "")
    assert proc.returncode == 1
    assert "PDFLEET_ROUTER_API_KEY is not set in the secrets file of this unit" in proc.stderr and "Fix:" in proc.stderr
    assert proc.stdout == ""  # the router never ran


def test_key_file_bare_or_env_line_and_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare, envfile = tmp_path / "key", tmp_path / "secrets.env"
    bare.write_text(KEY + "\n")
    envfile.write_text(f"# managed\nHF_TOKEN=other\n{routerkey.ENV_NAME}={KEY}\n")
    for f in (bare, envfile):
        f.chmod(0o600)
        assert routerkey.router_key(f) == KEY
    envfile.chmod(0o644)
    wants = re.escape(f"mode 0644: others may read the key. Fix: chmod 0600 {envfile}")
    with pytest.raises(routerkey.RouterKeyError, match=wants):
        routerkey.router_key(envfile)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(routerkey.RouterKeyError, match="holds no key"):
        routerkey.router_key(empty)
    with pytest.raises(routerkey.RouterKeyError, match="No such file"):
        routerkey.router_key(tmp_path / "missing")
    monkeypatch.setenv(routerkey.ENV_NAME, KEY)
    assert routerkey.router_key(None) == KEY
    monkeypatch.delenv(routerkey.ENV_NAME)
    assert routerkey.router_key(None) is None


class Router:
    """A loopback HTTP server that records each request's Authorization header; every path but /server_info
    answers 401 unless it carries the key."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        self.port = 0

    async def start(self) -> Router:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = head.split(" ")[1]
        auth = next((ln.split(":", 1)[1].strip() for ln in head.split("\r\n")
                     if ln.lower().startswith("authorization:")), None)
        self.seen.append((path, auth))
        ok = auth == f"Bearer {KEY}" or path == "/server_info"  # the worker's; the router wants the key
        body = b'{"workers": []}' if ok else b'{"error": "unauthorized"}'
        status = b"200 OK" if ok else b"401 Unauthorized"
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        writer.close()


@pytest.fixture
def bearer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(client, "_BEARER", {})
    yield


def test_verify_sends_the_key_to_the_router_only(bearer: None) -> None:
    async def go() -> tuple[list, list, tuple, tuple]:
        router, worker = await Router().start(), await Router().start()
        before = await checks._router_listing(router.url, 5)
        client.set_bearer(router.url, KEY)
        after = await checks._router_listing(router.url, 5)
        await client.request(worker.url + "/server_info")
        session = client.StreamSession(0, router.url + "/v1/chat/completions", client.chat_body("m", "p", 1, True))
        await session.run()
        return router.seen, worker.seen, before, after

    router_seen, worker_seen, before, after = asyncio.run(go())
    assert before == ("", set(), 401)  # no key: refused, and said so
    assert after == ("/workers", set(), None)
    assert router_seen[:3] == [("/workers", None), ("/get_loads", None), ("/list_workers", None)]
    assert all(auth == f"Bearer {KEY}" for _, auth in router_seen[-2:])  # the listing and the stream
    assert router_seen[-1][0] == "/v1/chat/completions"
    assert worker_seen == [("/server_info", None)]  # a worker never gets the router's key


def test_refused_listing_names_the_key_and_the_fix() -> None:
    msg = checks.refused_listing("http://10.0.0.1:8000", 401)
    assert "refused its worker listing (401)" in msg and "--api-key-file" in msg and "PDFLEET_ROUTER_API_KEY" in msg


def test_verify_cli_refuses_a_key_file_others_may_read(tmp_path: Path) -> None:
    f = tmp_path / "key"
    f.write_text(KEY)
    f.chmod(0o644)
    proc = subprocess.run([sys.executable, "-m", "pdfleet.verify", "--router", "http://127.0.0.1:9", "--prefill",
                           "http://127.0.0.1:9", "--decode", "http://127.0.0.1:9", "--api-key-file", str(f)],
                          capture_output=True, text=True, timeout=60, check=False, cwd=REPO_ROOT)
    assert proc.returncode == 2
    assert f"chmod 0600 {f}" in proc.stderr and KEY not in proc.stdout + proc.stderr


def test_prune_drain_sends_the_key_from_its_request(bearer: None) -> None:
    """The units role's drain (python -m pdfleet.prune drain, the request on standard input) asks the router with
    the key the request carries, and the report it prints never holds the key."""

    async def drain(key: str | None) -> tuple[list, str]:
        router = await Router().start()
        req = {"router": router.url, "timeout_s": 1, "workers": [{"url": "http://127.0.0.1:9", "role": "prefill"}],
               "keep": [], **({"api_key": key} if key else {})}
        env = {k: v for k, v in os.environ.items() if k != routerkey.ENV_NAME}
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "pdfleet.prune", "drain", env=env,
                                                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate(json.dumps(req).encode())
        assert proc.returncode == 0
        return router.seen, out.decode()

    seen, out = asyncio.run(drain(KEY))
    assert seen and all(auth == f"Bearer {KEY}" for _, auth in seen) and KEY not in out
    assert "not removed from the router" not in out
    seen, out = asyncio.run(drain(None))
    assert seen[0][1] is None and "not removed from the router" in out and "401" in out


def test_the_gateway_key_is_on_by_default_and_only_the_router_reads_it() -> None:
    raw = copy.deepcopy(SIM)
    raw["router"].pop("api_key", None)
    plan = build_plan(raw, HOSTS, {raw["sglang"]["version"]: raw["sglang"]["patch"]})
    secrets = {u.name: u.secrets for u in plan.units()}
    assert secrets == {"pdfleet-prefill0": [], "pdfleet-decode0": [], "pdfleet-router": [routerkey.ENV_NAME]}
    assert _router(plan).exec_start[1:3] == ["-c", ROUTER_KEY_SHIM]
    assert _router(_plan(False)).secrets == []  # off only when the inventory says so


def test_each_unit_reads_only_its_own_secrets_file(tmp_path: Path) -> None:
    from pdfleet.render import render_plan

    render_plan(_plan(True), tmp_path)
    lines = {p.name: [ln for ln in p.read_text().splitlines() if ln.startswith("EnvironmentFile=")]
             for p in (tmp_path / "node1").glob("*.service")}
    assert lines["pdfleet-router.service"] == ["EnvironmentFile=/etc/pdfleet/pdfleet-router.env",
                                               "EnvironmentFile=/etc/pdfleet/pdfleet-router-secrets.env"]
    for worker in ("pdfleet-prefill0.service", "pdfleet-decode0.service"):  # no file that could hold the key
        assert lines[worker] == [f"EnvironmentFile=/etc/pdfleet/{worker.removesuffix('.service')}.env"]


def _inventory(tmp_path: Path, secrets: str) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    node1:\n      ansible_host: 10.77.0.11\n")
    (inv / "group_vars" / "all" / "cluster.yml").write_text(yaml.safe_dump({"pdfleet_cluster": SIM}))
    (inv / "group_vars" / "all" / "secrets.yml").write_text(secrets)
    return inv


def test_commands_find_the_key_in_the_inventory_after_a_file_or_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One name everywhere: a command given -i finds pdfleet_units_secrets.PDFLEET_ROUTER_API_KEY there (templated
    as a play would), unless a key file or $PDFLEET_ROUTER_API_KEY says otherwise."""
    from pdfleet.inventory import InventorySource

    monkeypatch.delenv(routerkey.ENV_NAME, raising=False)
    inv = InventorySource.of(_inventory(tmp_path, "k: " + KEY + "\npdfleet_units_secrets:\n"
                                        "  PDFLEET_ROUTER_API_KEY: '{{ k }}'\n"))
    assert routerkey.find_key(None, inv) == KEY
    assert routerkey.find_key(None, None) is None
    monkeypatch.setenv(routerkey.ENV_NAME, "from-env")
    assert routerkey.find_key(None, inv) == "from-env"
    keyfile = tmp_path / "key"
    keyfile.write_text("from-file")
    keyfile.chmod(0o600)
    assert routerkey.find_key(keyfile, inv) == "from-file"
    monkeypatch.delenv(routerkey.ENV_NAME)
    none = InventorySource.of(_inventory(tmp_path / "other", "pdfleet_units_secrets: {HF_TOKEN: x}\n"))
    assert routerkey.find_key(None, none) is None


class _Out:
    def __init__(self, tty: bool) -> None:
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_keygen_pipes_a_new_key_and_never_shows_one_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from pdfleet import keygen

    args = argparse.Namespace(name=routerkey.ENV_NAME, show=False)
    piped, again = _Out(False), _Out(False)
    assert keygen.cmd_keygen(args, piped) == 0 and keygen.cmd_keygen(args, again) == 0
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", piped.text) and piped.text != again.text  # 32 random bytes, no newline
    tty = _Out(True)
    assert keygen.cmd_keygen(args, tty) == 2 and tty.text == ""
    err = capsys.readouterr().err
    name = routerkey.ENV_NAME
    assert f"pdfleet keygen {name} | ansible-vault encrypt_string --stdin-name {name}" in err


def test_a_key_the_inventory_generates_with_a_lookup_is_found_by_a_fresh_command(tmp_path: Path) -> None:
    """The sim inventories' way (Ansible's password lookup by its full name, generating a 0600 file on first use),
    read by a new process as a pdfleet command would: the collection loader is set up before templating."""
    keyfile = tmp_path / "state" / "router-api-key"
    inv = _inventory(tmp_path, "pdfleet_units_secrets:\n  PDFLEET_ROUTER_API_KEY: \"{{ lookup('ansible.builtin."
                     f"password', '{keyfile}', chars=['ascii_letters', 'digits'], length=40) }}}}\"\n")
    code = ("from pdfleet.inventory import InventorySource; from pdfleet.routerkey import find_key; "
            f"print(find_key(None, InventorySource.of({str(inv)!r})))")
    env = {k: v for k, v in os.environ.items() if k != routerkey.ENV_NAME}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == keyfile.read_text().strip() and len(proc.stdout.strip()) == 40
    assert keyfile.stat().st_mode & 0o777 == 0o600


def test_a_key_vaulted_as_the_readme_says_is_read_with_the_password_file_and_refused_without(tmp_path: Path) -> None:
    """`pdfleet keygen NAME | ansible-vault encrypt_string --stdin-name NAME` gives an inline-encrypted value, which
    ansible-core (>= 2.19) decrypts only inside its process-wide Vault context: a fresh pdfleet command given
    --vault-password-file reads it (pdfleet.inventory sets that context up), and without the file it refuses,
    naming the flag."""
    bin_dir = Path(sys.executable).parent
    password = tmp_path / "vault-password"
    password.write_text("correct horse battery staple\n")
    password.chmod(0o600)
    name = routerkey.ENV_NAME
    keygen = subprocess.Popen([str(bin_dir / "pdfleet"), "keygen", name], stdout=subprocess.PIPE)
    vaulted = subprocess.run([str(bin_dir / "ansible-vault"), "encrypt_string", "--vault-password-file",
                              str(password), "--stdin-name", name], stdin=keygen.stdout, capture_output=True,
                             text=True, timeout=120, check=True).stdout
    assert keygen.wait(timeout=30) == 0 and "$ANSIBLE_VAULT" in vaulted
    inv = _inventory(tmp_path, "pdfleet_units_secrets:\n" + "".join(f"  {line}\n" for line in vaulted.splitlines()))
    env = {k: v for k, v in os.environ.items() if k not in (name, "ANSIBLE_VAULT_PASSWORD_FILE")}

    def read(*vault_files: str) -> subprocess.CompletedProcess[str]:
        code = ("from pathlib import Path; from pdfleet.inventory import InventorySource; "
                "from pdfleet.routerkey import find_key; "
                f"print(find_key(None, InventorySource((Path({str(inv)!r}),), vault_password_files={vault_files!r})))")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              check=False, env=env, cwd=tmp_path)

    opened = read(str(password))
    assert opened.returncode == 0, opened.stderr[-2000:]
    key = opened.stdout.strip()
    assert len(key) >= 40 and key not in vaulted
    refused = read()
    assert refused.returncode != 0 and "--vault-password-file" in refused.stderr, refused.stderr[-2000:]
