"""The simulated hosts' stand-in for NVIDIA's CUDA apt repository (and the few wheels the sim needs).

On simulated hosts the provisioning roles (nvidia_driver, cuda_toolkit, nixl) run for real: they add a
signed apt source, pin and install exact package versions, hold them, decide about reboots and check the
GPUs. What they install here are **stand-ins** built by this module with dpkg-deb: packages with the real
names and versions of NVIDIA's repository (Debian 12: nvidia-open, nvidia-kernel-open-dkms, nvidia-smi,
nvidia-persistenced, nvidia-modprobe, libnvidia-ml1, libcuda1, cuda-toolkit-13-0, ...; Ubuntu 22.04 and 24.04,
served beside it at NVIDIA's paths: nvidia-driver-580-open, nvidia-dkms-580-open, nvidia-utils-580, ...) whose
programs imitate the real ones on top of the simulated hardware:

* ``nvidia-smi`` reports the GPUs of ``/etc/pdfleet-sim/hardware.json`` (written by the sim play of
  provision.yml: 8x "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887 MiB, compute capability 12.0)
  with the version of the *loaded* module, and their peer access (``topo -p2p r|w|n|a|p``, in the driver's
  matrix layout: ``p2p`` for every pair, ``p2p_pairs`` {"i-j": "NS"} for some; ``topo -m``), and fails like
  the real one when no module is loaded or the
  loaded module and the library differ ("Driver/library version mismatch");
* the kernel module is "loaded" at boot only (a oneshot unit copies the installed module's data to
  ``/run/pdfleet-sim/nvidia``), so a driver change needs a reboot exactly as on real hosts;
* ``modinfo`` (at ``/usr/lib/pdfleet-sim/bin/modinfo``) shows the installed module's licence and version;
* ``mokutil --sb-state`` (``/usr/lib/pdfleet-sim/hardware/mokutil``) reads the simulated firmware;
* ``nvcc --version``, ``ucx_info -d`` and a ``nixl-cu13`` backend wheel (imports, does no transfers).

Every stand-in says so: the package descriptions start with "pdfleet sim stand-in", the programs print a
banner on stderr, and the repository's Release file is labelled as such. Only inventories that define
``pdfleet_sim`` point at this repository (inventory/sim/group_vars/all/provision.yml).

The repository is built once per recipe under the sim cache directory and served over HTTP on the sim
bridge's gateway address (never on another interface). The server exits by itself when the cluster's
state directory or the bridge goes away (``pdfleet sim down``), and ``stop`` ends it at once.

    python -m pdfleet_sim.aptrepo ensure --state-dir S --bridge B --bind 10.77.0.1 --port 8765 --json
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import http.server
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from email.utils import formatdate
from functools import partial
from pathlib import Path

from pdfleet.versions import PINS

from .hosttypes import DEFAULT_CACHE_DIR, SimError
from .paths import import_path

STANDIN = "pdfleet sim stand-in"
BANNER = f"[{STANDIN}: simulated hardware, not NVIDIA software]"
ARCH_DIR = "x86_64"
# The layout of NVIDIA's repository: <distro>/<arch>/, a flat repository per distribution release, each with that
# distribution's package names and revisions (the nvidia_driver role's vars name the same paths and packages).
DISTRO_REVISIONS: dict[str, str] = {"debian12": "-1", "ubuntu2204": "-0ubuntu1", "ubuntu2404": "-0ubuntu1"}
DISTRO_PATH = f"debian12/{ARCH_DIR}"  # the sim inventories' hosts report Debian 12 unless pdfleet_sim_os says else
KEY_NAME = "pdfleet-sim-archive-key.asc"
# The served key's fingerprint, written into the sim cluster's state directory by `ensure` (never served): the sim
# inventories pin the nvidia_driver role to it (nvidia_driver_cuda_repo_key_fingerprint, a file lookup on the
# control machine), as a production inventory pins NVIDIA's. The key is made per build of the repository.
KEY_FINGERPRINT_FILE = "aptrepo-key.fingerprint"
PIP_DIR = "pip"
HARDWARE_DIR = "sim-hardware"
PID_FILE = "aptrepo.pid"
DEFAULT_PORT = 8765

# What the repository offers. Two driver versions of branch 580 (the pin and a newer one, so a pin change
# is a real upgrade), and a newer branch's nvidia-modprobe: without pinning apt would mix it in (a known
# breakage, see shared/hardware.md).
DRIVER_VERSIONS: tuple[str, ...] = ("580.95.05", "580.105.08")
NEWER_BRANCH_MODPROBE = "590.48.01"
CUDA_TOOLKITS: dict[str, str] = {"13.0": "13.0.2", "12.8": "12.8.1"}
UCX_VERSION = "1.19.0"
NIXL_VERSIONS: tuple[str, ...] = (str(PINS["nixl_version"]),)  # the pin (constants.yml)
DEBIAN_REVISION = "-1"  # NVIDIA's Debian 12 packages (and its CUDA toolkits everywhere) are versioned <upstream>-1
MODULE_LICENSE = "Dual MIT/GPL"  # what `modinfo nvidia` shows for the open kernel module

# The GPU the simulated hosts carry (the sim play writes it to /etc/pdfleet-sim/hardware.json).
DEFAULT_HARDWARE: dict[str, object] = {
    "gpu_count": 8,
    "gpu_model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "gpu_memory_mib": 97887,
    "compute_capability": "12.0",
    "secure_boot": False,
    "p2p": "OK",  # `nvidia-smi topo -p2p` status of every GPU pair (e.g. NS: ACS/IOMMU turned peer access off)
    "p2p_pairs": {},  # {"0-4": "NS"}: the status of single pairs, both directions
}


# ---------------------------------------------------------------- stand-in programs

_PY = "#!/usr/bin/python3\n"

NVIDIA_SMI = _PY + r'''"""pdfleet sim stand-in for nvidia-smi (simulated GPUs; not NVIDIA software)."""
import json, sys
from pathlib import Path

LIB_VERSION = "@VERSION@"
print("@BANNER@", file=sys.stderr)
hw = {"gpu_count": 8, "gpu_model": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "gpu_memory_mib": 97887,
      "compute_capability": "12.0"}
with __import__("contextlib").suppress(OSError, ValueError):
    hw.update(json.loads(Path("/etc/pdfleet-sim/hardware.json").read_text()))
loaded = Path("/run/pdfleet-sim/nvidia/version")
if not loaded.is_file():
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
          "latest NVIDIA driver is installed and running.")
    sys.exit(9)
driver = loaded.read_text().strip()
if driver != LIB_VERSION:
    print("Failed to initialize NVML: Driver/library version mismatch")
    print(f"NVML library version: {LIB_VERSION}")
    sys.exit(18)
gpus = []
for i in range(int(hw["gpu_count"])):
    gpus.append({"index": str(i), "name": hw["gpu_model"], "memory.total": str(hw["gpu_memory_mib"]),
                 "compute_cap": hw["compute_capability"], "driver_version": driver,
                 "uuid": f"GPU-5130{i:04d}-0000-0000-0000-pdfleetsim{i:02d}",
                 "pci.bus_id": f"00000000:{0x18 + i:02X}:00.0",
                 "persistence_mode": "Enabled", "memory.used": "0", "temperature.gpu": "30"})
args = sys.argv[1:]
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
if query is not None:
    fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "csv")
    fields = [f.strip() for f in query.split(",")]
    if "noheader" not in fmt:
        print(", ".join(fields))
    for g in gpus:
        print(", ".join(g.get(f, "[N/A]") + ("" if "nounits" in fmt or f != "memory.total" else " MiB")
                        for f in fields))
elif "-L" in args:
    for g in gpus:
        print(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
elif args[:2] == ["topo", "-p2p"]:
    # The driver's layout (a tab after every cell, a space before each row) and legend. Peer access comes from
    # hardware.json: "p2p" for every pair, "p2p_pairs" {"i-j": status} for a pair (both directions); no NVLink.
    if len(args) < 3 or args[2] not in ("r", "w", "n", "a", "p"):
        print('Option "-p2p" is missing its value.' if len(args) < 3 else "Invalid combination of input arguments. "
              "Please run 'nvidia-smi -h' for help.")
        sys.exit(2)
    pairs = {tuple(sorted(int(x) for x in k.split("-"))): v for k, v in dict(hw.get("p2p_pairs") or {}).items()}
    def cell(i, j):
        if i == j:
            return "X"
        if args[2] == "n":
            return "NS"
        return pairs.get(tuple(sorted((i, j))), hw.get("p2p", "OK"))
    n = len(gpus)
    print(" \t" + "".join(f"GPU{j}\t" for j in range(n)))
    for i in range(n):
        print(f" GPU{i}\t" + "".join(f"{cell(i, j)}\t" for j in range(n)))
    print("\nLegend:\n")
    for code, meaning in (("X", "Self"), ("OK", "Status Ok"), ("CNS", "Chipset not supported"),
                          ("GNS", "GPU not supported"), ("TNS", "Topology not supported"), ("NS", "Not supported"),
                          ("DR", "Disabled by regkey"), ("U", "Unknown")):
        print(f"  {code:<4} = {meaning}")
elif args[:2] == ["topo", "-m"]:
    n = len(gpus)
    print("\t" + "".join(f"GPU{j}\t" for j in range(n)) + "CPU Affinity\tNUMA Affinity\tGPU NUMA ID")
    for i in range(n):
        print(f"GPU{i}\t" + "".join(" X \t" if i == j else ("NODE\t" if i // 4 == j // 4 else "SYS\t")
                                     for j in range(n)) + f"{0 if i < 4 else 1}\t{0 if i < 4 else 1}\t\tN/A")
    print("\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect between "
          "NUMA nodes (e.g., QPI/UPI)\n  NODE = Connection traversing PCIe as well as the interconnect between PCIe "
          "Host Bridges within a NUMA node")
else:
    print("@BANNER@")
    print(f"NVIDIA-SMI {LIB_VERSION}    Driver Version: {driver}    CUDA Version: 13.0")
    for g in gpus:
        print(f"|  {g['index']}  {g['name']}  {g['pci.bus_id']}  0MiB / {g['memory.total']}MiB |")
'''

MODINFO = _PY + r'''"""pdfleet sim stand-in for `modinfo nvidia`: the installed (not the loaded) module."""
import json, sys
from pathlib import Path

print("@BANNER@", file=sys.stderr)
args = sys.argv[1:]
field = None
if "-F" in args:
    field = args[args.index("-F") + 1]
    args = [a for i, a in enumerate(args) if a != "-F" and (i == 0 or args[i - 1] != "-F")]
name = args[-1] if args else ""
data = Path("/usr/lib/pdfleet-sim/nvidia/module.json")
if name != "nvidia" or not data.is_file():
    print(f"modinfo: ERROR: Module {name} not found.", file=sys.stderr)
    sys.exit(1)
info = json.loads(data.read_text())
if field:
    if field in info:
        print(info[field])
else:
    for k, v in info.items():
        print(f"{k + ':':<16}{v}")
'''

MODULE_LOAD = r'''#!/bin/sh
# pdfleet sim stand-in: "load" the installed NVIDIA kernel module at boot (a real module stays loaded at
# its old version until the next reboot; so does this one).
set -eu
mkdir -p /run/pdfleet-sim/nvidia /var/lib/pdfleet-sim/nvidia
python3 -c 'import json; print(json.load(open("/usr/lib/pdfleet-sim/nvidia/module.json"))["version"])' \
  > /run/pdfleet-sim/nvidia/version
cp /usr/lib/pdfleet-sim/nvidia/module.json /run/pdfleet-sim/nvidia/module.json
echo "$(date -u +%FT%TZ) loaded $(cat /run/pdfleet-sim/nvidia/version)" >> /var/lib/pdfleet-sim/nvidia/loads.log
'''

MODULE_UNIT = """[Unit]
Description=pdfleet sim stand-in: load the NVIDIA kernel module at boot
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target nvidia-persistenced.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/pdfleet-sim/bin/nvidia-module-load

[Install]
WantedBy=sysinit.target
"""

PERSISTENCED = r'''#!/bin/sh
# pdfleet sim stand-in for nvidia-persistenced: needs the loaded module, then idles.
echo "@BANNER@" >&2
if [ ! -f /run/pdfleet-sim/nvidia/version ]; then
  echo "nvidia-persistenced failed to initialize. Check syslog for more details." >&2
  exit 1
fi
exec sleep infinity
'''

PERSISTENCED_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon (pdfleet sim stand-in)
Wants=syslog.target

[Service]
Type=simple
ExecStart=/usr/bin/nvidia-persistenced
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

NVCC = r'''#!/bin/sh
# pdfleet sim stand-in for nvcc: reports its version, compiles nothing.
echo "@BANNER@" >&2
case "${1:-}" in
  --version|-V)
    echo "nvcc: NVIDIA (R) Cuda compiler driver"
    echo "Copyright (c) 2005-2025 NVIDIA Corporation"
    echo "Cuda compilation tools, release @MINOR@, V@FULL@"
    echo "Build cuda_@MINOR@.r@MINOR@/compiler.pdfleet-sim_0" ;;
  *) echo "nvcc (pdfleet sim stand-in): compiling is not simulated" >&2; exit 1 ;;
esac
'''

UCX_INFO = _PY + r'''"""pdfleet sim stand-in for ucx_info: lists the transports of the installed UCX plugins."""
import os, sys

print("@BANNER@", file=sys.stderr)
args = sys.argv[1:]
if "-v" in args:
    print("# Library version: @UCX@ (pdfleet sim stand-in)")
    sys.exit(0)
if "-d" not in args:
    print("usage: ucx_info -d | -v (pdfleet sim stand-in)", file=sys.stderr)
    sys.exit(1)
devices = {"self": ["memory"], "tcp": sorted(d for d in os.listdir("/sys/class/net") if d != "lo") + ["lo"],
           "posix": ["memory"], "sysv": ["memory"], "cma": ["memory"]}
if os.path.exists("/usr/lib/ucx/libuct_cuda.so.0"):
    devices |= {"cuda_copy": ["cuda"], "cuda_ipc": ["cuda"], "gdr_copy": ["cuda"]}
for tl, devs in devices.items():
    for dev in devs:
        print("#\n# Memory domain / Component: " + tl)
        print(f"#      Transport: {tl}")
        print(f"#         Device: {dev}")
'''

MOKUTIL = _PY + r'''"""pdfleet sim stand-in for mokutil: reports the simulated firmware's Secure Boot state."""
import json, sys
from pathlib import Path

print("@BANNER@", file=sys.stderr)
hw = {}
try:
    hw = json.loads(Path("/etc/pdfleet-sim/hardware.json").read_text())
except (OSError, ValueError):
    pass
if "--sb-state" not in sys.argv[1:]:
    print("mokutil (pdfleet sim stand-in): only --sb-state is simulated", file=sys.stderr)
    sys.exit(1)
print("SecureBoot enabled" if hw.get("secure_boot") else "SecureBoot disabled")
'''

HEADERS_README = """pdfleet sim stand-in for the kernel headers of the running kernel {kernel}.
The simulated hosts share this machine's kernel; nothing is built against these headers.
"""


def _fill(text: str, **values: str) -> str:
    text = text.replace("@BANNER@", BANNER)
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


# ---------------------------------------------------------------- packages


@dataclass
class Package:
    """One stand-in .deb: control fields and files (path -> (content, mode))."""

    name: str
    version: str
    summary: str
    depends: list[str] = field(default_factory=list)
    files: dict[str, tuple[str, int]] = field(default_factory=dict)
    postinst: str = ""
    arch: str = "amd64"

    def control(self) -> str:
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            f"Architecture: {self.arch}",
            "Maintainer: pdfleet simulation <sim@pdfleet.invalid>",
            "Section: non-free/libs",
            "Priority: optional",
        ]
        if self.depends:
            lines.append(f"Depends: {', '.join(self.depends)}")
        lines.append(f"Description: {STANDIN}: {self.summary}")
        lines.append(" Built by pdfleet_sim.aptrepo for simulated hosts only; it imitates the package of the")
        lines.append(" same name in NVIDIA's CUDA repository and contains no NVIDIA software.")
        return "\n".join(lines) + "\n"


def _driver_packages(version: str) -> list[Package]:
    v = version + DEBIAN_REVISION
    same = f"(= {v})"
    module = json.dumps({"filename": f"/lib/modules/{os.uname().release}/updates/dkms/nvidia.ko",
                         "license": MODULE_LICENSE, "version": version,
                         "description": f"NVIDIA open kernel module ({STANDIN})"}, indent=1)
    return [
        Package("nvidia-open", v, f"NVIDIA driver metapackage, open kernel modules, {version}",
                [f"nvidia-driver {same}", f"nvidia-kernel-open-dkms {same}"]),
        Package("nvidia-driver", v, f"NVIDIA driver userspace, {version}",
                [f"nvidia-smi {same}", f"libnvidia-ml1 {same}", f"libcuda1 {same}",
                 f"nvidia-modprobe {same}", f"nvidia-persistenced {same}"]),
        Package("nvidia-kernel-open-dkms", v, f"NVIDIA open kernel module (DKMS), {version}",
                files={"usr/lib/pdfleet-sim/nvidia/module.json": (module + "\n", 0o644),
                       "usr/lib/pdfleet-sim/bin/modinfo": (_fill(MODINFO), 0o755),
                       "usr/lib/pdfleet-sim/bin/nvidia-module-load": (MODULE_LOAD, 0o755),
                       "lib/systemd/system/pdfleet-sim-nvidia-module.service": (MODULE_UNIT, 0o644)},
                postinst="systemctl enable pdfleet-sim-nvidia-module.service >/dev/null 2>&1 || true\n"),
        Package("nvidia-smi", v, f"NVIDIA System Management Interface, {version}", [f"libnvidia-ml1 {same}"],
                files={"usr/bin/nvidia-smi": (_fill(NVIDIA_SMI, VERSION=version), 0o755)}),
        Package("libnvidia-ml1", v, f"NVIDIA Management Library (NVML), {version}",
                files={"usr/lib/pdfleet-sim/nvidia/libnvidia-ml.version": (version + "\n", 0o644)}),
        Package("libcuda1", v, f"NVIDIA CUDA driver library, {version}",
                files={"usr/lib/pdfleet-sim/nvidia/libcuda.version": (version + "\n", 0o644)}),
        Package("nvidia-persistenced", v, f"NVIDIA persistence daemon, {version}",
                files={"usr/bin/nvidia-persistenced": (_fill(PERSISTENCED), 0o755),
                       "lib/systemd/system/nvidia-persistenced.service": (PERSISTENCED_UNIT, 0o644)}),
        _modprobe(version),
    ]


def _modprobe(version: str, revision: str = DEBIAN_REVISION) -> Package:
    return Package("nvidia-modprobe", version + revision, f"NVIDIA device-file helper, {version}",
                   files={"usr/lib/pdfleet-sim/nvidia/nvidia-modprobe.version": (version + "\n", 0o644)})


def _ubuntu_driver_packages(version: str, revision: str) -> list[Package]:
    """NVIDIA's Ubuntu packages of a driver (up to branch 580 the branch is in the names), with the same stand-in
    programs as the Debian ones, where Ubuntu's packages put them: nvidia-smi in nvidia-utils-<branch>, the
    kernel module in nvidia-dkms-<branch>-open, NVML and libcuda in libnvidia-compute-<branch>."""
    v = version + revision
    b = version.split(".")[0]
    same = f"(= {v})"
    debian = {p.name: p for p in _driver_packages(version)}
    dkms, smi, daemon = debian["nvidia-kernel-open-dkms"], debian["nvidia-smi"], debian["nvidia-persistenced"]
    return [
        Package(f"nvidia-driver-{b}-open", v, f"NVIDIA driver metapackage (open kernel module), {version}",
                [f"nvidia-dkms-{b}-open {same}", f"nvidia-kernel-common-{b} {same}", f"nvidia-utils-{b} {same}",
                 f"nvidia-compute-utils-{b} {same}", f"libnvidia-compute-{b} {same}"]),
        Package(f"nvidia-dkms-{b}-open", v, f"NVIDIA open kernel module (DKMS), {version}",
                [f"nvidia-kernel-common-{b} {same}"], files=dkms.files, postinst=dkms.postinst),
        Package(f"nvidia-kernel-common-{b}", v, f"NVIDIA kernel module support files, {version}",
                files={"usr/lib/pdfleet-sim/nvidia/kernel-common.version": (version + "\n", 0o644)}),
        Package(f"nvidia-utils-{b}", v, f"NVIDIA driver support binaries (nvidia-smi), {version}",
                [f"libnvidia-compute-{b} {same}"], files=smi.files),
        Package(f"libnvidia-compute-{b}", v, f"NVIDIA libcompute package (NVML, libcuda), {version}",
                files={"usr/lib/pdfleet-sim/nvidia/libnvidia-ml.version": (version + "\n", 0o644),
                       "usr/lib/pdfleet-sim/nvidia/libcuda.version": (version + "\n", 0o644)}),
        Package(f"nvidia-compute-utils-{b}", v, f"NVIDIA compute utilities, {version}",
                [f"nvidia-persistenced {same}", f"libnvidia-compute-{b} {same}"],
                files={"usr/lib/pdfleet-sim/nvidia/compute-utils.version": (version + "\n", 0o644)}),
        Package("nvidia-persistenced", v, f"NVIDIA persistence daemon, {version}", files=daemon.files),
        _modprobe(version, revision),
    ]


def _cuda_packages(minor: str, full: str) -> list[Package]:
    dash = minor.replace(".", "-")
    nvcc = _fill(NVCC, MINOR=minor, FULL=full)
    return [Package(f"cuda-toolkit-{dash}", full + DEBIAN_REVISION, f"CUDA Toolkit {full} (nvcc --version only)",
                    files={f"usr/local/cuda-{minor}/bin/nvcc": (nvcc, 0o755),
                           f"usr/local/cuda-{minor}/version.json":
                           (json.dumps({"cuda": {"name": "CUDA SDK", "version": full}}) + "\n", 0o644)})]


def _ucx_packages() -> list[Package]:
    v = UCX_VERSION + DEBIAN_REVISION
    return [
        Package("ucx", v, f"Unified Communication X {UCX_VERSION} (ucx_info only)",
                files={"usr/bin/ucx_info": (_fill(UCX_INFO, UCX=UCX_VERSION), 0o755)}),
        Package("ucx-cuda", v, f"UCX CUDA transports (cuda_copy, cuda_ipc) {UCX_VERSION}", [f"ucx (= {v})"],
                files={"usr/lib/ucx/libuct_cuda.so.0": (f"{STANDIN}: marker, not a library\n", 0o644)}),
    ]


def _headers_package(kernel: str) -> Package:
    return Package(f"linux-headers-{kernel}", "0.pdfleet.sim.1", f"kernel headers for {kernel} (marker only)",
                   files={f"usr/src/linux-headers-{kernel}/README.pdfleet-sim":
                          (HEADERS_README.format(kernel=kernel), 0o644)},
                   postinst=f"mkdir -p /lib/modules/{kernel}\n"
                            f"ln -sfn /usr/src/linux-headers-{kernel} /lib/modules/{kernel}/build\n")


def packages(kernel: str | None = None, distro: str = "debian12") -> list[Package]:
    """Every stand-in package of one distribution's repository (DISTRO_REVISIONS)."""
    revision = DISTRO_REVISIONS[distro]
    out: list[Package] = []
    for v in DRIVER_VERSIONS:
        out += _ubuntu_driver_packages(v, revision) if distro.startswith("ubuntu") else _driver_packages(v)
    out.append(_modprobe(NEWER_BRANCH_MODPROBE, revision))
    for minor, full in CUDA_TOOLKITS.items():
        out += _cuda_packages(minor, full)
    out += _ucx_packages()
    out.append(_headers_package(kernel or os.uname().release))
    return out


def build_deb(pkg: Package, out_dir: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="pdfleet-deb-") as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        (root / "DEBIAN/control").write_text(pkg.control())
        if pkg.postinst:
            post = root / "DEBIAN/postinst"
            post.write_text("#!/bin/sh\nset -e\n" + pkg.postinst)
            post.chmod(0o755)
        for rel, (content, mode) in pkg.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            path.chmod(mode)
        for d in [p for p in root.rglob("*") if p.is_dir()]:
            d.chmod(0o755)
        deb = out_dir / f"{pkg.name}_{pkg.version}_{pkg.arch}.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
                       check=True, capture_output=True, text=True)
    return deb


def _packages_index(debs: Sequence[Path], repo: Path) -> str:
    """The Packages index of a flat repository (what apt-ftparchive/dpkg-scanpackages write)."""
    stanzas = []
    for deb in sorted(debs):
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True,
                                 text=True).stdout.rstrip("\n")
        data = deb.read_bytes()
        stanzas.append(control + f"\nFilename: ./{deb.relative_to(repo)}\nSize: {len(data)}\n"
                       f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")
    return "\n".join(stanzas)


def _release(repo: Path, names: Sequence[str]) -> str:
    lines = ["Origin: pdfleet-sim", f"Label: {STANDIN} of NVIDIA's CUDA repository", "Architectures: amd64",
             f"Date: {formatdate(usegmt=True)}", "Acquire-By-Hash: no"]
    for algo, fn in (("MD5Sum", hashlib.md5), ("SHA256", hashlib.sha256)):
        lines.append(f"{algo}:")
        for name in names:
            data = (repo / name).read_bytes()
            lines.append(f" {fn(data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


def _gpg(home: Path, *args: str, input_text: str | None = None) -> str:
    return subprocess.run(["gpg", "--homedir", str(home), "--batch", "--yes", "--no-tty", *args], check=True,
                          capture_output=True, text=True, input=input_text).stdout


def _sign(repos: Sequence[Path]) -> None:
    """Sign each repository's Release with one throwaway key made for this build; publish only the public half
    (beside each repository's packages, where NVIDIA's repositories keep their key)."""
    home = Path(tempfile.mkdtemp(prefix="pdfleet-gpg-"))
    home.chmod(0o700)
    try:
        _gpg(home, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
             f"pdfleet sim apt repository ({STANDIN}, not NVIDIA) <sim@pdfleet.invalid>", "ed25519", "sign", "never")
        public = _gpg(home, "--armor", "--export")
        for repo in repos:
            (repo / KEY_NAME).write_text(public)
            _gpg(home, "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release"))
            _gpg(home, "-abs", "-o", str(repo / "Release.gpg"), str(repo / "Release"))
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def key_fingerprint(www: Path) -> str:
    """The fingerprint of the repository's served key (www/<DISTRO_PATH>/KEY_NAME), as gpg reads it (the primary
    key's, 40 upper-case hex digits; every distribution's path serves the same key)."""
    home = Path(tempfile.mkdtemp(prefix="pdfleet-gpg-"))
    home.chmod(0o700)
    try:
        rows = _gpg(home, "--with-colons", "--import-options", "show-only", "--import",
                    str(www / DISTRO_PATH / KEY_NAME)).splitlines()
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    # the first fpr row follows the primary key's pub row (subkeys' follow their sub rows)
    fprs = [r.split(":")[9] for r in rows if r.startswith("fpr:")]
    if not fprs or not rows[0].startswith("pub:"):
        raise SimError(f"{www / DISTRO_PATH / KEY_NAME}: gpg found no public key in it")
    return fprs[0].upper()


def record_key_fingerprint(state_dir: Path, www: Path) -> str:
    """Write the served key's fingerprint to <state_dir>/KEY_FINGERPRINT_FILE (what the sim inventories pin)."""
    fingerprint = key_fingerprint(www)
    path = state_dir / KEY_FINGERPRINT_FILE
    if not path.is_file() or path.read_text().strip() != fingerprint:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(fingerprint + "\n")
        tmp.replace(path)
    return fingerprint


# ---------------------------------------------------------------- wheels


def _record_line(path: str, data: bytes) -> str:
    import base64

    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_nixl_backend_wheel(version: str, cuda_major: int, out_dir: Path) -> Path:
    """A stand-in for NVIDIA's nixl-cu<major> backend wheel: the modules the `nixl` meta package imports
    (`_bindings`, `_utils`, `logging`, `_api`), with an agent that refuses to transfer."""
    mod = f"nixl_cu{cuda_major}"
    dist = f"nixl_cu{cuda_major}-{version}"
    api = (f'"""{STANDIN}: NIXL API surface only (no transfers)."""\n'
           "PDFLEET_SIM_STANDIN = True\nDEFAULT_COMM_PORT = 5555\n\n\n"
           "class nixl_agent_config:  # noqa: N801\n    def __init__(self, *args, **kwargs):\n"
           "        self.args, self.kwargs = args, kwargs\n\n\n"
           "class nixl_agent:  # noqa: N801\n    def __init__(self, *args, **kwargs):\n"
           f"        raise RuntimeError('{STANDIN}: NIXL transfers are not simulated')\n")
    files = {
        f"{mod}/__init__.py": f'"""{STANDIN} for NVIDIA\'s {mod} (not NVIDIA software)."""\n'
                              f"PDFLEET_SIM_STANDIN = True\n__version__ = {version!r}\n",
        f"{mod}/_bindings.py": f'"""{STANDIN}."""\n',
        f"{mod}/_utils.py": f'"""{STANDIN}."""\n',
        f"{mod}/logging.py": f'"""{STANDIN}."""\n',
        f"{mod}/_api.py": api,
        f"{dist}.dist-info/METADATA": (f"Metadata-Version: 2.1\nName: nixl-cu{cuda_major}\nVersion: {version}\n"
                                       f"Summary: {STANDIN} of NVIDIA's nixl-cu{cuda_major} (no transfers)\n"),
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: pdfleet_sim.aptrepo\nRoot-Is-Purelib: true\n"
                                   "Tag: py3-none-any\n",
        f"{dist}.dist-info/top_level.txt": mod + "\n",
    }
    record = [_record_line(p, c.encode()) for p, c in files.items()] + [f"{dist}.dist-info/RECORD,,"]
    files[f"{dist}.dist-info/RECORD"] = "\n".join(record) + "\n"
    wheel = out_dir / f"{dist}-py3-none-any.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, content in files.items():
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, content)
    wheel.write_bytes(buf.getvalue())
    return wheel


# ---------------------------------------------------------------- the repository


def recipe(kernel: str | None = None) -> dict[str, object]:
    """Everything the built repository depends on; its hash names the cached build."""
    src = Path(__file__).read_bytes()
    return {"kernel": kernel or os.uname().release, "source": hashlib.sha256(src).hexdigest(),
            "drivers": list(DRIVER_VERSIONS), "cuda": CUDA_TOOLKITS, "ucx": UCX_VERSION, "nixl": list(NIXL_VERSIONS)}


def repo_dir(cache_dir: Path) -> Path:
    digest = hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir / f"aptrepo-{digest}"


def build(www: Path, kernel: str | None = None) -> Path:
    """Build the whole served tree under `www`: <distro>/<arch>/ for each of DISTRO_REVISIONS (debs, indexes,
    key), pip/, sim-hardware/."""
    repos = []
    for distro in DISTRO_REVISIONS:
        repo = www / distro / ARCH_DIR
        repo.mkdir(parents=True, exist_ok=True)
        debs = [build_deb(p, repo) for p in packages(kernel, distro)]
        (repo / "Packages").write_text(_packages_index(debs, repo))
        with gzip.GzipFile(repo / "Packages.gz", "wb", mtime=0) as gz:
            gz.write((repo / "Packages").read_bytes())
        (repo / "Release").write_text(_release(repo, ["Packages", "Packages.gz"]))
        repos.append(repo)
    _sign(repos)
    pip_dir = www / PIP_DIR
    pip_dir.mkdir(exist_ok=True)
    for v in NIXL_VERSIONS:
        for major in (12, 13):
            build_nixl_backend_wheel(v, major, pip_dir)
    hw = www / HARDWARE_DIR
    hw.mkdir(exist_ok=True)
    (hw / "mokutil").write_text(_fill(MOKUTIL))
    return www


def ensure_built(cache_dir: Path = DEFAULT_CACHE_DIR) -> Path:
    """The cached, served tree of this recipe, built first when missing (a few seconds)."""
    final = repo_dir(cache_dir)
    if all((final / "www" / distro / ARCH_DIR / "InRelease").is_file() for distro in DISTRO_REVISIONS):
        return final / "www"
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        build(tmp / "www")
        (tmp / "recipe.json").write_text(json.dumps(recipe(), indent=2, sort_keys=True))
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another builder won the race
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final / "www"


# ---------------------------------------------------------------- serving


@dataclass(frozen=True)
class Served:
    url: str  # the apt repository (NVIDIA's layout: .../debian12/x86_64; .../ubuntu2204/x86_64 beside it, ...)
    key_url: str
    key_fingerprint: str  # the served key's, also in <state_dir>/KEY_FINGERPRINT_FILE
    pip_url: str
    hardware_url: str
    pid: int
    started: bool
    root: str


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    with contextlib.suppress(OSError):
        if "pdfleet_sim.aptrepo" not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
            return False
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    return True


def _read_pid(state_dir: Path) -> tuple[int, dict[str, object]] | None:
    try:
        data = json.loads((state_dir / PID_FILE).read_text())
        return int(data["pid"]), data
    except (OSError, ValueError, KeyError):
        return None


def _port_open(address: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=0.5):
        return True
    return False


def ensure(state_dir: Path, bridge: str, bind: str, port: int = DEFAULT_PORT,
           cache_dir: Path = DEFAULT_CACHE_DIR) -> Served:
    """Build the repository if needed and serve it on bind:port (idempotent: a running server is kept)."""
    if not state_dir.is_dir():
        raise SimError(f"{state_dir}: no sim cluster state here; start the sim hosts first (pdfleet sim up)")
    if not Path("/sys/class/net", bridge).exists():
        raise SimError(f"bridge {bridge} does not exist; start the sim hosts first (pdfleet sim up)")
    www = ensure_built(cache_dir)
    fingerprint = record_key_fingerprint(state_dir, www)
    base = f"http://{bind}:{port}"
    urls = {"url": f"{base}/{DISTRO_PATH}", "key_url": f"{base}/{DISTRO_PATH}/{KEY_NAME}",
            "key_fingerprint": fingerprint, "pip_url": f"{base}/{PIP_DIR}/",
            "hardware_url": f"{base}/{HARDWARE_DIR}", "root": str(www)}
    known = _read_pid(state_dir)
    if known is not None:
        pid, data = known
        same = data.get("root") == str(www) and data.get("bind") == bind and data.get("port") == port
        if _pid_alive(pid) and same and _port_open(bind, port):
            return Served(pid=pid, started=False, **urls)
        if _pid_alive(pid):
            _terminate(pid)
    log = (state_dir / "aptrepo.log").open("ab")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pdfleet_sim.aptrepo", "serve", "--root", str(www), "--bind", bind,
             "--port", str(port), "--state-dir", str(state_dir), "--bridge", bridge],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
            env=dict(os.environ, PYTHONPATH=import_path()),
        )
    finally:
        log.close()
    deadline = time.monotonic() + 15
    while not _port_open(bind, port):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = (state_dir / "aptrepo.log").read_text(errors="replace").splitlines()[-5:]
            raise SimError(f"the sim apt repository did not start on {bind}:{port}: " + " / ".join(tail))
        time.sleep(0.1)
    (state_dir / PID_FILE).write_text(json.dumps({"pid": proc.pid, "root": str(www), "bind": bind, "port": port}))
    return Served(pid=proc.pid, started=True, **urls)


def _terminate(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not _pid_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def stop(state_dir: Path) -> bool:
    """Stop the server of this sim cluster; True if one was running."""
    known = _read_pid(state_dir)
    if known is None:
        return False
    pid, _ = known
    alive = _pid_alive(pid)
    if alive:
        _terminate(pid)
    (state_dir / PID_FILE).unlink(missing_ok=True)
    return alive


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def serve(root: Path, bind: str, port: int, state_dir: Path, bridge: str) -> int:
    """Serve `root` until stopped, or until the sim cluster (state dir or bridge) is gone."""
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    server = http.server.ThreadingHTTPServer((bind, port), partial(_Handler, directory=str(root)))

    def watch() -> None:
        while state_dir.is_dir() and Path("/sys/class/net", bridge).exists():
            time.sleep(1)
        server.shutdown()

    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    threading.Thread(target=watch, daemon=True).start()
    print(f"{STANDIN} apt repository: serving {root} on http://{bind}:{port}", flush=True)
    server.serve_forever(poll_interval=0.5)
    server.server_close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdfleet_sim.aptrepo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ensure", help="build (if needed) and serve the stand-in repository (idempotent)")
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--bridge", required=True)
    p.add_argument("--bind", required=True, help="the sim bridge's gateway address")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("serve", help="(internal) the server process")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--bind", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--bridge", required=True)
    p = sub.add_parser("stop", help="stop the server of a sim cluster")
    p.add_argument("--state-dir", type=Path, required=True)
    p = sub.add_parser("build", help="build the served tree into a directory (no server)")
    p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "ensure":
            served = ensure(args.state_dir.resolve(), args.bridge, args.bind, args.port, args.cache_dir)
            print(json.dumps(asdict(served)) if args.json else f"{served.url} (pid {served.pid})")
        elif args.cmd == "serve":
            return serve(args.root, args.bind, args.port, args.state_dir, args.bridge)
        elif args.cmd == "stop":
            print("stopped" if stop(args.state_dir) else "not running")
        else:
            print(build(args.out))
    except SimError as exc:
        print(f"pdfleet: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
