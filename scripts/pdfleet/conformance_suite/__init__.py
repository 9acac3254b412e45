"""The host conformance suite (pytest-testinfra over SSH), run by `pdfleet conformance` from the installed
package: package modules, so a wheel carries it and no checkout is needed."""
