"""The nvidia_driver role's one probe of a host (pdfleet_probe: settings on stdin; prints JSON).

In one round trip: the OS facts the role reads (distribution, version, OS family, running kernel), the Secure Boot
state, the machine id, the installed packages the role names for this distribution (settings: by_distribution, by
distribution name and release: prerequisites and packages, plus the running kernel's headers) or its hold
pattern covers, with their selection, and those of the pattern not held (one dpkg-query), the state of the files
the role writes (sha256, mode, owner), the repository's signing key as served now and the OpenPGP fingerprints of it
and of the installed keyring (computed here, no gpg needed), the installed and the loaded kernel module, the signs
of a pending reboot, nvidia-persistenced's state and nvidia-smi's answer. Changes nothing.

What differs from the wanted state (settings: want) is decided here, by differs() and persistenced_differs(), in
"differs" (one entry per put-back task of tasks/repository.yml and tasks/install.yml, which runs only on its
entry) and "persistenced_differs" (tasks/converge.yml's nvidia-persistenced task); key_refusal() decides, in
"key_refusal", whether the served key is refused: its fingerprint is not the pinned one (settings: want.key_fingerprint,
the role's nvidia_driver_cuda_repo_key_fingerprint), and the checks before a change stop the role there.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import ssl
import sys
import urllib.request

from pdfleet_probe_common import os_facts, read_text, run, stat_of, unit_state

# The fields of a distribution's entry (the role's vars/<Distribution>.yml), empty.
NO_ENTRY = {"packages": [], "package_revision": "", "hold_regex": "", "pin_globs": [], "prerequisites": [],
            "releases": {}}

# The entries of "differs", each gating one task of tasks/repository.yml or tasks/install.yml.
DIFFERS = ("prerequisites", "keyring_dir", "key", "source", "pin", "blacklist_dir", "blacklist", "headers", "driver",
           "hold")


def pick(facts: dict, by_distribution: dict) -> tuple[str, str, dict]:
    """(entry, release, dist): this host's entry of by_distribution (its distribution's name) and its release (the
    distribution's version, else its major version, among the entry's releases: Ubuntu's 22.04, Debian's 12 of
    12.7); ("", "", {}) for a distribution or release the role does not support."""
    dist = by_distribution.get(facts["distribution"]) or {}
    releases = dist.get("releases") or {}
    for release in (facts["distribution_version"], facts["distribution_major_version"]):
        if release and release in releases:
            return facts["distribution"], release, dist
    return "", "", {}


def _key(url: str) -> dict:
    """The key as served at url: its text, sha256 and fingerprints (key_fingerprints); error when not downloadable."""
    try:
        with urllib.request.urlopen(url, timeout=30, context=ssl.create_default_context()) as resp:
            body = resp.read().decode()
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return {"content": None, "error": f"{url}: {exc}"}
    return {"content": body, "sha256": hashlib.sha256(body.encode()).hexdigest(), "error": "",
            **key_fingerprints(body)}


# ---------------------------------------------------------------- OpenPGP fingerprints (RFC 4880, RFC 9580)

ARMOR_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
PUBLIC_KEY_TAG = 6  # a primary public key (subkeys are tag 14, and apt trusts them only bound to their primary)
FINGERPRINT = re.compile(r"[0-9A-F]{40}")


def _crc24(data: bytes) -> int:
    """The armor checksum (RFC 4880 section 6.1)."""
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def armored_blocks(text: str) -> list[bytes]:
    """The binary data of each ASCII-armoured public key block in text: armor header lines up to an empty line,
    base64 lines, an optional "=" checksum (checked when present). ValueError for a damaged block."""
    blocks: list[bytes] = []
    lines: list[str] | None = None
    in_headers = False
    checksum = ""
    for raw in text.splitlines():
        line = raw.strip()
        if lines is None:
            if line == ARMOR_BEGIN:
                lines, in_headers, checksum = [], True, ""
            continue
        if line.startswith("-----END PGP "):
            try:
                data = base64.b64decode("".join(lines), validate=True)
            except binascii.Error as exc:
                raise ValueError(f"the armoured key is not valid base64 ({exc})") from None
            if checksum:
                try:
                    want = int.from_bytes(base64.b64decode(checksum, validate=True), "big")
                except binascii.Error:
                    want = -1
                if want != _crc24(data):
                    raise ValueError("the armoured key's checksum does not match its data (a damaged download?)")
            blocks.append(data)
            lines = None
        elif in_headers and ":" in line:
            continue  # an armor header ("Version: ...", "Comment: ...")
        elif in_headers and not line:
            in_headers = False
        elif line.startswith("=") and len(line) == 5:
            checksum = line[1:]
        else:
            in_headers = False
            lines.append(line)
    if lines is not None:
        raise ValueError("the armoured key block has no END line (a cut-off download?)")
    return blocks


def packets(data: bytes) -> list[tuple[int, bytes]]:
    """(tag, body) of each OpenPGP packet in data: old-format headers (tag in bits 5-2, a 1-, 2- or 4-octet or an
    indeterminate length) and new-format ones (tag in bits 5-0, one- to five-octet or partial body lengths).
    ValueError for data that is not a sequence of whole packets."""
    out: list[tuple[int, bytes]] = []
    i = 0
    try:
        while i < len(data):
            ctb = data[i]
            i += 1
            if not ctb & 0x80:
                raise ValueError(f"octet {i - 1} is not an OpenPGP packet header")
            if ctb & 0x40:  # new format
                tag, body = ctb & 0x3F, b""
                while True:
                    first = data[i]
                    i += 1
                    partial = 224 <= first < 255
                    if first < 192:
                        length = first
                    elif first < 224:
                        length = ((first - 192) << 8) + data[i] + 192
                        i += 1
                    elif first == 255:
                        length = int.from_bytes(data[i:i + 4], "big")
                        if i + 4 > len(data):
                            raise IndexError
                        i += 4
                    else:
                        length = 1 << (first & 0x1F)
                    if i + length > len(data):
                        raise IndexError
                    body += data[i:i + length]
                    i += length
                    if not partial:
                        break
            else:  # old format
                tag, kind = (ctb >> 2) & 0x0F, ctb & 0x03
                if kind == 3:  # indeterminate: to the end of the data
                    length = len(data) - i
                else:
                    size = (1, 2, 4)[kind]
                    if i + size > len(data):
                        raise IndexError
                    length = int.from_bytes(data[i:i + size], "big")
                    i += size
                if i + length > len(data):
                    raise IndexError
                body = data[i:i + length]
                i += length
            out.append((tag, bytes(body)))
    except IndexError:
        raise ValueError("the key data ends inside a packet (a cut-off download?)") from None
    return out


def key_fingerprints(text: str) -> dict:
    """{"fingerprints": the v4 fingerprint (40 upper-case hex digits) of each primary public key in the armoured
    text, in order; "fingerprint_error": why none could be read, else ""}. A v4 fingerprint is the SHA-1 of 0x99,
    the public-key packet body's length in two octets and the body (RFC 4880 section 12.2)."""
    try:
        found: list[str] = []
        for block in armored_blocks(text):
            for tag, body in packets(block):
                if tag != PUBLIC_KEY_TAG:
                    continue
                if not body or body[0] != 4:
                    raise ValueError(f"a version {body[0] if body else '(none)'} public key: only version 4 keys "
                                     "(40-hex-digit fingerprints) are read")
                if len(body) > 0xFFFF:
                    raise ValueError("a public-key packet too long for a version 4 key")
                found.append(hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper())
        if not found:
            return {"fingerprints": [], "fingerprint_error": "no ASCII-armoured OpenPGP public key in it"}
        return {"fingerprints": found, "fingerprint_error": ""}
    except ValueError as exc:
        return {"fingerprints": [], "fingerprint_error": str(exc)}


def pinned_fingerprint(cfg: dict) -> str:
    """The pinned fingerprint (want.key_fingerprint), upper-case and without the spaces gpg groups it with."""
    return str(cfg["want"].get("key_fingerprint") or "").replace(" ", "").upper()


def _named(key: dict | None) -> str:
    if key is None:
        return "none (no file)"
    return ", ".join(key.get("fingerprints") or []) or f"none readable ({key.get('fingerprint_error', '')})"


def key_refusal(cfg: dict, found: dict) -> str:
    """Why the repository's key is refused before anything changes ("" when it is not; pure): the pin is not a
    fingerprint, or the key served now (found["key"]) is not exactly the one pinned key. A key that could not be
    downloaded is repository.yml's check (it names the error); an installed keyring with another key is replaced
    with the served one only when that one is the pinned key (differs: "key")."""
    pin = pinned_fingerprint(cfg)
    if not FINGERPRINT.fullmatch(pin):
        return (f"nvidia_driver_cuda_repo_key_fingerprint {cfg['want'].get('key_fingerprint')!r} is not an OpenPGP "
                "v4 fingerprint (40 hex digits). Set it to the fingerprint of the key that signs the CUDA repository "
                "(the role's default is NVIDIA's key; a mirror that signs with its own key needs that key's). "
                "Nothing was changed.")
    key = found.get("key") or {"error": "no key URL"}
    if key["error"] or key.get("fingerprints") == [pin]:
        return ""
    url = cfg.get("key_url", "")
    return (f"the CUDA repository's signing key served at {url} has the fingerprint {_named(key)}, not the pinned "
            f"{pin} (nvidia_driver_cuda_repo_key_fingerprint); it was not installed and nothing was changed. If the "
            "repository's owner really changed its key (NVIDIA rotating it, or your mirror re-signing), check the new "
            "key's fingerprint against one you trust (not the same download) and set "
            "nvidia_driver_cuda_repo_key_fingerprint to it; otherwise something between this host and the repository "
            "serves another key: find out what before you go on.")


def _module_info(modinfo: str) -> dict:
    """The installed nvidia module's version and licence from one `modinfo nvidia` ("key: value" lines; the first
    of each key; empty where there is no module)."""
    fields: dict = {}
    for line in run([modinfo, "nvidia"])["stdout"].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return {"module_version": fields.get("version", ""), "module_license": fields.get("license", "")}


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """Which of DIFFERS the host does not have as wanted (cfg["want"]), from what the probe found (pure).

    want: version (the pinned driver version; the packages are wanted at it plus the entry's package_revision),
    dirs (entry -> {path, state}: a directory's {mode, owner, group}), files (entry -> {path, state}: a file's
    {sha256, mode, owner, group}; the key's sha256 is the key as served now, found["key"]), key_fingerprint (the
    pinned key: the installed keyring, found["installed_key"], must hold exactly it) and pin_sha256 (the pin file's
    sha256 by distribution name: its content names that distribution's globs and revision). A key that could not
    be downloaded differs, so repository.yml runs and its check names the error; an installed keyring of another
    key differs, so it is replaced, but only with a served key that is the pinned one (key_refusal stops the role
    before that otherwise); a distribution without an entry differs in everything that depends on the entry (the
    checks before a change stop the role there)."""
    want = cfg["want"]
    dist = found["dist"]
    packages = found["packages"]

    def dir_differs(entry: str) -> bool:
        return found["dirs"].get(want["dirs"][entry]["path"]) != want["dirs"][entry]["state"]

    def file_differs(entry: str, sha256: str | None = None) -> bool:
        spec = want["files"][entry]
        state = spec["state"] if sha256 is None else {**spec["state"], "sha256": sha256}
        return found["files"].get(spec["path"]) != state

    key = found.get("key") or {"error": "no key URL"}
    pin_sha256 = want["pin_sha256"].get(found["entry"])
    package_version = want["version"] + dist["package_revision"]
    return {
        "prerequisites": any(name not in packages for name in dist["prerequisites"]),
        "keyring_dir": dir_differs("keyring_dir"),
        "key": (key["error"] != "" or file_differs("key", key["sha256"])
                or (found.get("installed_key") or {}).get("fingerprints") != [pinned_fingerprint(cfg)]),
        "source": file_differs("source"),
        "pin": pin_sha256 is None or file_differs("pin", pin_sha256),
        "blacklist_dir": dir_differs("blacklist_dir"),
        "blacklist": file_differs("blacklist"),
        "headers": "linux-headers-" + found["os"]["kernel"] not in packages,
        # every package installed, all at the one pinned version (none at all: differs, as for no entry)
        "driver": not dist["packages"] or any(name not in packages or packages[name]["version"] != package_version
                                              for name in dist["packages"]),
        "hold": len(found["unheld"]) > 0,
    }


def persistenced_differs(cfg: dict, found: dict) -> bool:
    """Whether nvidia-persistenced is wanted (want: persistenced) but not in its wanted state (want: unit, e.g.
    enabled and active); never in check mode before the pinned module is installed (it would not start)."""
    want = cfg["want"]
    at_pin = found["module_version"] == want["version"]
    return (bool(want["persistenced"]) and not (want["check_mode"] and not at_pin)
            and found.get("unit", {}) != want["unit"])


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out: dict = {}
    if cfg.get("secure_boot_command"):
        out["secure_boot"] = run(cfg["secure_boot_command"])
    out["machine_id"] = (read_text("/etc/machine-id") or "").strip()
    rows = run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n"])["stdout"].splitlines()
    installed = {w[0]: {"version": w[1], "want": w[2]}
                 for w in (r.split() for r in rows) if len(w) == 5 and w[4] == "installed"}
    # only what the role asks about: the named packages and those the hold pattern covers
    facts = os_facts()
    out["os"] = facts
    entry, release, dist = pick(facts, cfg.get("by_distribution", {}))
    out["supported"] = bool(dist)
    out["entry"], out["release"] = entry, release
    out["repo_distro"] = dist["releases"][release] if dist else ""  # NVIDIA's repository path: debian12, ubuntu2204
    out["dist"] = {**NO_ENTRY, **dist}  # what the role's tasks read, whole even for an unsupported distribution
    held = re.compile(dist["hold_regex"]) if dist.get("hold_regex") else None
    wanted = set(dist.get("prerequisites", []) + dist.get("packages", []))
    if dist:
        wanted.add("linux-headers-" + facts["kernel"])
    out["packages"] = {name: state for name, state in installed.items()
                       if name in wanted or (held is not None and held.match(name))}
    out["unheld"] = sorted(name for name, state in out["packages"].items()
                           if held is not None and held.match(name) and state["want"] != "hold")
    out["files"] = {p: stat_of(p, digest=True) for p in cfg.get("files", [])}
    out["dirs"] = {p: stat_of(p) for p in cfg.get("dirs", [])}
    out["exists"] = {p: os.path.exists(p) for p in cfg.get("exists", [])}
    if cfg.get("key_url"):
        out["key"] = _key(cfg["key_url"])
    keyring = cfg.get("want", {}).get("files", {}).get("key", {}).get("path")
    installed = read_text(keyring) if keyring else None
    out["installed_key"] = None if installed is None else key_fingerprints(installed)
    out.update(_module_info(cfg["modinfo"]))
    out["loaded_version"] = (read_text(cfg["loaded_version_path"]) or "").strip()
    if cfg.get("unit"):
        out["unit"] = unit_state(cfg["unit"])
    if cfg.get("smi_query"):
        smi = run(["nvidia-smi", "--query-gpu=" + cfg["smi_query"], "--format=csv,noheader,nounits"])
        out["smi"] = {"rc": smi["rc"], "stdout_lines": smi["stdout"].splitlines(), "msg": smi["stderr"].strip()}
    out["differs"] = differs(cfg, out)
    out["key_refusal"] = key_refusal(cfg, out)
    out["persistenced_differs"] = persistenced_differs(cfg, out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
