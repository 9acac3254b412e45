"""What SGLang's NIXL code needs to import on CPU: the one list, read by the patch tests' runtime
(pdfleet.patch.runtime) and the simulated hosts' runtime (pdfleet_sim.image). Standard library only: `make site`
reads it with this machine's python3 before the project venv exists (pdfleet_sim.build)."""

from __future__ import annotations

# Found empirically: what `import sglang.srt.disaggregation.nixl.conn` needs on CPU (0.5.15.post1 and
# 0.5.23), besides what the overlays carry. torch must be the CUDA build (CPU torch lacks pieces
# SGLang imports); pip takes it from this machine's local wheel store.
BASE_REQUIREMENTS: tuple[str, ...] = (
    "torch==2.14.1",
    "torchvision==0.29.1",
    "aiohttp==3.14.5",
    "apache-tvm-ffi==0.1.11",
    "dill==0.4.1",
    "distro==1.9.0",
    "einops==0.8.2",
    "gguf==0.19.0",
    "hf-xet==1.8.0",
    "hypothesis==6.170.17",  # for tests/sglang's property test, which runs in this interpreter
    "httpx==0.28.1",
    "httpx2==2.16.2",
    "ipython==9.18.1",
    "loguru==0.7.3",
    "msgspec==0.23.0",
    "orjson==3.13.0",
    "packaging==26.4",
    "partial-json-parser==0.2.1.1.post7",
    "psutil==7.2.2",
    "pybase64==1.5.1",
    "pydantic==2.14.4",
    "pyyaml==6.0.4",
    "pyzmq==27.3.0",
    "regex==2026.11.19",
    "requests==2.34.2",
    "safetensors==0.8.0",
    "sentencepiece==0.2.3",
    "sniffio==1.3.1",
    "starlette==1.10.0",
    "tqdm==4.70.1",
    "typer==0.29.2",
)
