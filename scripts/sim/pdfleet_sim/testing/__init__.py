"""Helpers for tests and benchmarks only (a local PD pair on loopback, a load client, scratch sim inventories).
Nothing in the service or the playbooks imports them, and the sim workers' wheel leaves them out."""
