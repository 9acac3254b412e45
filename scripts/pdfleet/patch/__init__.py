"""The patch feature: our nixl/conn.py patch series per SGLang version (manifest, errors), applying and checking
it (apply), the CPU runtime that imports SGLang's real code (runtime, nixlcpu), the wedge reproduction (wedge),
and the `pdfleet patch` commands (cli, status). Kept light: the simulated workers import nixlcpu from here."""
