"""The nixl role's one probe of a host (pdfleet_probe: settings on stdin; prints JSON): which of the packages it names
are installed (one dpkg-query), the service venv and its distributions, what `import nixl` reports in it,
`ucx_info -d`, and `nvidia-smi topo -p2p <mode>` for the modes it is given (GPU peer access, judged on the controller
by pdfleet.gpu_peers). From these and the wanted state (settings "want"), differs() decides which task of
tasks/apply.yml has something to put back ("differs"); the role's checks read the rest. Changes nothing."""

import json
import os
import sys

from pdfleet_probe_common import dists_of, installed_packages, lock_state, pin_key, purelib_of, run

# The entries of "differs", one per task of tasks/apply.yml (vars/main.yml: __nixl_differs).
DIFFERS = ("packages", "venv", "backend", "meta")


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """Which entries differ on the host, from the settings (their "packages" are the wanted .debs; "want" holds
    install_mode and the pins "backend", the stand-in backend of sim mode, and "meta", the nixl package) and what the
    probe found ("packages" installed, "venv" there, "dists" as normalised "name==version"; "lock": in pypi mode
    the venv against its hash lock, settings "lock"). Pins compare as dists_of names them (pin_key); in pypi mode
    "meta" also differs when the venv differs from the lock (the lock file, or a locked requirement missing)."""
    want = cfg["want"]
    dists = set(found["dists"])
    return {"packages": any(p not in found["packages"] for p in cfg.get("packages", [])),
            "venv": not found["venv"],
            "backend": want["install_mode"] == "sim" and pin_key(want["backend"]) not in dists,
            "meta": pin_key(want["meta"]) not in dists or bool((found.get("lock") or {}).get("differs"))}


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    python = os.path.join(cfg["venv"], "bin", "python")
    installed = installed_packages()
    out = {"packages": sorted(p for p in cfg.get("packages", []) if p in installed), "venv": os.path.isfile(python),
           "dists": sorted(dists_of(purelib_of(cfg["venv"]))),
           "nixl_import": run([python, "-c", "import importlib.metadata as m, nixl; print(m.version('nixl'))"]),
           "ucx": run([cfg["ucx_info"], "-d"]),
           "gpu_peers": {mode: run([cfg["nvidia_smi"], "topo", "-p2p", mode])
                         for mode in cfg.get("gpu_peer_modes", [])},
           "lock": lock_state(cfg["lock"]) if cfg.get("lock") else None}
    if "want" in cfg:  # without a wanted state there is no verdict (never a silent "nothing differs")
        out["differs"] = differs(cfg, out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
