"""A CPU stand-in for ``python -m sglang.launch_server``: ``python -m pdfleet_sim.worker``.

It takes the same command line as SGLang, serves SGLang's HTTP API shapes, and in PD mode runs the
real prefill/decode handshake over ZMQ against the installed SGLang's real ``NixlKVManager``
threads (through :mod:`pdfleet.patch.nixlcpu`), so a wedge of those threads hangs it as in production.
Importing this package needs neither torch, SGLang, aiohttp nor pyzmq.
"""
