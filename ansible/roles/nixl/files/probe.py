"""The nixl role's one probe of a host (pdfleet_probe: settings on stdin; prints JSON): which of the packages it names
are installed (one dpkg-query), the service venv and its distributions, what `import nixl` reports in it,
`ucx_info -d`, and `nvidia-smi topo -p2p <mode>` for the modes it is given (GPU peer access, judged on the controller
by pdfleet.gpu_peers). The role's tasks run only for what differs; its checks read this. Changes nothing."""

import json
import os
import sys

from pdfleet_probe_common import dists_of, installed_packages, purelib_of, run


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    python = os.path.join(cfg["venv"], "bin", "python")
    installed = installed_packages()
    out = {"packages": sorted(p for p in cfg.get("packages", []) if p in installed), "venv": os.path.isfile(python),
           "dists": sorted(dists_of(purelib_of(cfg["venv"]))),
           "nixl_import": run([python, "-c", "import importlib.metadata as m, nixl; print(m.version('nixl'))"]),
           "ucx": run([cfg["ucx_info"], "-d"]),
           "gpu_peers": {mode: run([cfg["nvidia_smi"], "topo", "-p2p", mode])
                         for mode in cfg.get("gpu_peer_modes", [])}}
    print(json.dumps(out))


main()
