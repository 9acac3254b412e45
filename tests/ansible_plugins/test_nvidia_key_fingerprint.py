"""The CUDA repository's signing key is pinned by fingerprint (issue 30 item 6): the nvidia_driver probe computes the
OpenPGP v4 fingerprint of a key itself (files/probe.py: ASCII armor, packets, SHA-1 over the primary public-key
packet; no gpg on the host), gpg agrees, and a served key of another fingerprint is refused naming both, the URL
and the fix. The sim's stand-in repository records its key's fingerprint where the sim inventories read it, and it
is the one the probe computes."""

from __future__ import annotations

import base64
import copy
import os
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from pdfleet.paths import REPO_ROOT

from ansible_plugins.probes import load_probe

KEYS = Path(__file__).parent / "keys"
# Two keys of ours, made with gpg for these tests (no secret kept), and their fingerprints as gpg printed them:
# A is RSA with an encryption subkey (only the primary counts), B is Ed25519.
FINGERPRINT = {"a": "9ADA96DDE3ECAD689B1003FD3F249C24329882AC", "b": "94B2BEF66383A1890AC4A9C553D8488F3B18D937"}
SUBKEY_A = "68613B159A5C1F0A2BB6206C7ABFB4DF6446FD7E"
URL = "https://mirror.example/cuda/repos/debian12/x86_64/3bf863cc.pub"
HAS_GPG = shutil.which("gpg") is not None


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    return load_probe("nvidia_driver")


def _armored(name: str) -> str:
    return (KEYS / f"key-{name}.asc").read_text()


def _armor(data: bytes) -> str:
    """data as an armoured public key block (no checksum line: optional in RFC 9580)."""
    text = base64.b64encode(data).decode()
    lines = [text[i:i + 64] for i in range(0, len(text), 64)]
    return "\n".join(["-----BEGIN PGP PUBLIC KEY BLOCK-----", "", *lines, "-----END PGP PUBLIC KEY BLOCK-----", ""])


def _new_header(tag: int, body: bytes, form: str) -> bytes:
    """A new-format packet: a one-, two- or five-octet length, or partial lengths then the rest."""
    ctb = bytes([0xC0 | tag])
    n = len(body)
    if form == "one":
        assert n < 192
        return ctb + bytes([n]) + body
    if form == "two":
        assert 192 <= n < 8384
        return ctb + bytes([((n - 192) >> 8) + 192, (n - 192) & 0xFF]) + body
    if form == "five":
        return ctb + b"\xff" + n.to_bytes(4, "big") + body
    assert form == "partial" and n > 256
    rest = body[256:]  # two partial lengths of 128 octets (0xE7), then the rest with a one- or two-octet length
    tail = (bytes([((len(rest) - 192) >> 8) + 192, (len(rest) - 192) & 0xFF]) if len(rest) >= 192
            else bytes([len(rest)]))
    return ctb + b"\xe7" + body[:128] + b"\xe7" + body[128:256] + tail + rest


def _old_header(tag: int, body: bytes, kind: int) -> bytes:
    """An old-format packet: a one-, two- or four-octet length, or an indeterminate one (kind 3)."""
    ctb = bytes([0x80 | (tag << 2) | kind])
    if kind == 3:
        return ctb + body
    return ctb + len(body).to_bytes((1, 2, 4)[kind], "big") + body


def test_the_fixed_keys_fingerprints_are_gpgs_primary_only(probe: ModuleType) -> None:
    for name, fingerprint in FINGERPRINT.items():
        assert probe.key_fingerprints(_armored(name)) == {"fingerprints": [fingerprint], "fingerprint_error": ""}
    assert SUBKEY_A not in probe.key_fingerprints(_armored("a"))["fingerprints"]
    # two blocks in one file: both primaries, in order
    both = probe.key_fingerprints(_armored("a") + _armored("b"))
    assert both["fingerprints"] == [FINGERPRINT["a"], FINGERPRINT["b"]]


@pytest.mark.parametrize("form", ["one", "two", "five", "partial", "old1", "old2", "old4", "old-indeterminate"])
def test_old_and_new_packet_headers_give_the_same_fingerprint(probe: ModuleType, form: str) -> None:
    """Each key's packets written again with another header: the fingerprint is the body's, whatever the header.
    B's public-key packet is short (one-octet lengths), A's is not."""
    name = "b" if form in ("one", "old1") else "a"
    packets = probe.packets(probe.armored_blocks(_armored(name))[0])
    tag, body = packets[0]
    assert tag == probe.PUBLIC_KEY_TAG
    if form.startswith("old"):
        kind = {"old1": 0, "old2": 1, "old4": 2, "old-indeterminate": 3}[form]
        first = _old_header(tag, body, kind)
        rest = b"".join(_old_header(t, b, 1) for t, b in packets[1:]) if kind != 3 else b""
    else:
        first = _new_header(tag, body, form)
        rest = b"".join(_new_header(t, b, "five") for t, b in packets[1:])
    out = probe.key_fingerprints(_armor(first + rest))
    assert out == {"fingerprints": [FINGERPRINT[name]], "fingerprint_error": ""}


@pytest.mark.skipif(not HAS_GPG, reason="needs gpg (the oracle)")
@pytest.mark.parametrize("algo", ["ed25519", "rsa2048"])
def test_a_key_generated_here_has_the_fingerprint_gpg_prints(probe: ModuleType, tmp_path: Path, algo: str) -> None:
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}

    def gpg(*args: str) -> str:
        return subprocess.run(["gpg", "--batch", "--no-tty", *args], env=env, capture_output=True, text=True,
                              check=True, timeout=120).stdout

    try:
        gpg("--passphrase", "", "--pinentry-mode", "loopback", "--quick-gen-key",
            f"pdfleet test {algo} <t@pdfleet.invalid>", algo, "sign", "never")
        rows = gpg("--with-colons", "--fingerprint").splitlines()
        armored = gpg("--armor", "--export")
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, check=False)
    want = next(r.split(":")[9] for r in rows if r.startswith("fpr:"))
    assert probe.key_fingerprints(armored) == {"fingerprints": [want], "fingerprint_error": ""}


@pytest.mark.parametrize(("damage", "error"), [
    (lambda t: "", "no ASCII-armoured OpenPGP public key"),
    (lambda t: "not a key at all\n", "no ASCII-armoured OpenPGP public key"),
    (lambda t: t[: len(t) // 2], "no END line"),
    (lambda t: _flip_checksum(t), "checksum does not match"),
    (lambda t: t.replace("\n\n", "\n\n!!!!\n", 1), "not valid base64"),
    (lambda t: _armor(_body_of(t)[:40]), "ends inside a packet"),
    (lambda t: _armor(b"\x01" + _body_of(t)), "not an OpenPGP packet header"),
    (lambda t: _armor(_with_version(t, 6)), "a version 6 public key"),
])
def test_a_damaged_or_unsupported_key_has_no_fingerprint_and_says_why(probe: ModuleType, damage: object,
                                                                      error: str) -> None:
    out = probe.key_fingerprints(damage(_armored("b")))  # type: ignore[operator]
    assert out["fingerprints"] == [] and error in out["fingerprint_error"], out


def _body_of(text: str) -> bytes:
    return load_probe("nvidia_driver").armored_blocks(text)[0]


def _with_version(text: str, version: int) -> bytes:
    data = bytearray(_body_of(text))
    assert data[0] == 0x98  # B's public key: an old-format header, one-octet length; the body's first octet follows
    data[2] = version
    return bytes(data)


def _flip_checksum(text: str) -> str:
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("=") and len(line) == 5)
    lines[i] = "=AAAA" if lines[i] != "=AAAA" else "=AAAB"
    return "\n".join(lines) + "\n"


def _cfg(pin: str = FINGERPRINT["a"]) -> dict:
    return {"key_url": URL, "want": {"key_fingerprint": pin}}


def _found(served: str = "a", installed: str | None = "a") -> dict:
    probe = load_probe("nvidia_driver")
    key = {"content": _armored(served), "sha256": "x", "error": "", **probe.key_fingerprints(_armored(served))}
    return {"key": key, "installed_key": None if installed is None else probe.key_fingerprints(_armored(installed))}


def test_the_pinned_key_served_is_not_refused(probe: ModuleType) -> None:
    assert probe.key_refusal(_cfg(), _found()) == ""
    # as gpg prints it (groups of four) or in lower case: the same pin
    spaced = " ".join(FINGERPRINT["a"][i:i + 4] for i in range(0, 40, 4)).lower()
    assert probe.key_refusal(_cfg(spaced), _found()) == ""


def test_a_served_key_of_another_fingerprint_is_refused_naming_both_the_url_and_the_fix(probe: ModuleType) -> None:
    message = probe.key_refusal(_cfg(), _found(served="b"))
    assert f"served at {URL} has the fingerprint {FINGERPRINT['b']}, not the pinned {FINGERPRINT['a']}" in message
    assert "nothing was changed" in message and "set nvidia_driver_cuda_repo_key_fingerprint" in message, message


def test_a_served_file_with_the_pinned_key_and_another_is_refused(probe: ModuleType) -> None:
    found = _found()
    found["key"].update(probe.key_fingerprints(_armored("a") + _armored("b")))
    message = probe.key_refusal(_cfg(), found)
    assert f"{FINGERPRINT['a']}, {FINGERPRINT['b']}, not the pinned" in message, message


def test_a_served_file_without_a_readable_key_is_refused_saying_why(probe: ModuleType) -> None:
    found = _found()
    found["key"].update(probe.key_fingerprints("<html>Not Found</html>"))
    message = probe.key_refusal(_cfg(), found)
    assert "fingerprint none readable (no ASCII-armoured OpenPGP public key in it)" in message, message


def test_a_key_that_could_not_be_downloaded_is_left_to_the_repository_check(probe: ModuleType) -> None:
    found = {"key": {"content": None, "error": f"{URL}: HTTP Error 404"}, "installed_key": None}
    assert probe.key_refusal(_cfg(), found) == ""


@pytest.mark.parametrize("pin", ["", "3BF863CC", FINGERPRINT["a"] + "00", "Z" * 40])
def test_a_pin_that_is_no_fingerprint_is_refused(probe: ModuleType, pin: str) -> None:
    message = probe.key_refusal(_cfg(pin), _found())
    assert f"nvidia_driver_cuda_repo_key_fingerprint {pin!r} is not an OpenPGP v4 fingerprint" in message


def test_an_installed_keyring_of_another_key_differs_and_is_replaced_only_by_the_pinned_one(
        probe: ModuleType) -> None:
    """differs["key"] (what repository.yml's install task runs on) is true for an installed keyring of another key;
    the install copies the served key, which key_refusal has already held to the pin."""
    cfg = {**_cfg(), "want": {**_cfg()["want"], "files": {"key": {"path": "/k", "state": {}}}}}
    # only the parts of differs() the key entry reads
    found = _found(served="a", installed="b")
    found["files"] = {"/k": {"sha256": "x"}}
    assert _key_differs(probe, cfg, found) is True and probe.key_refusal(cfg, found) == ""
    found = _found(served="b", installed="b")
    found["files"] = {"/k": {"sha256": "x"}}
    assert _key_differs(probe, cfg, found) is True and FINGERPRINT["b"] in probe.key_refusal(cfg, found)
    found = _found(served="a", installed="a")
    found["files"] = {"/k": {"sha256": "x"}}
    assert _key_differs(probe, cfg, found) is False


def _key_differs(probe: ModuleType, cfg: dict, found: dict) -> bool:
    """differs()["key"] with the rest of the wanted state filled in as converged (the test_differs module's)."""
    from ansible_plugins import test_differs_nvidia_driver as full

    whole_cfg = copy.deepcopy(full._cfg())
    whole_cfg["want"]["key_fingerprint"] = cfg["want"]["key_fingerprint"]
    whole_found = copy.deepcopy(full._converged())
    path = whole_cfg["want"]["files"]["key"]["path"]
    whole_found["files"][path] = {**whole_found["files"][path], "sha256": found["files"]["/k"]["sha256"]}
    whole_found["key"] = found["key"]
    whole_found["installed_key"] = found["installed_key"]
    return probe.differs(whole_cfg, whole_found)["key"]


@pytest.mark.skipif(not HAS_GPG, reason="the sim makes its key with gpg")
def test_the_sims_recorded_fingerprint_is_the_one_the_probe_computes(probe: ModuleType, tmp_path: Path) -> None:
    """The stand-in repository's key is made by aptrepo._sign (as a build makes it); `ensure` records its fingerprint
    with record_key_fingerprint in the state directory, where the sim inventories' lookup reads it."""
    from pdfleet_sim import aptrepo

    www = tmp_path / "www"
    repo = www / aptrepo.DISTRO_PATH
    repo.mkdir(parents=True)
    (repo / "Release").write_text("Origin: pdfleet sim stand-in\n")
    aptrepo._sign([repo])
    state = tmp_path / "state"
    state.mkdir()
    recorded = aptrepo.record_key_fingerprint(state, www)
    assert (state / aptrepo.KEY_FINGERPRINT_FILE).read_text() == recorded + "\n"
    served = probe.key_fingerprints((repo / aptrepo.KEY_NAME).read_text())
    assert served["fingerprints"] == [recorded]
    assert probe.key_refusal({"key_url": "http://sim", "want": {"key_fingerprint": recorded}},
                             {"key": {"error": "", **served}}) == ""
    # the sim inventories read that file, in the state directory their pdfleet_sim names
    for name in ("sim", "sim-mono", "sim-fleet"):
        text = (REPO_ROOT / "inventory" / name / "group_vars" / "all" / "provision.yml").read_text()
        assert (f"nvidia_driver_cuda_repo_key_fingerprint: \"{{{{ lookup('ansible.builtin.file', "
                f"pdfleet_sim.state_dir ~ '/{aptrepo.KEY_FINGERPRINT_FILE}') }}}}\"") in text, name
