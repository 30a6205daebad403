"""Helpers shared by the pass tests of tests/passes and the cross-pass suites of tests/ (one module per family)."""
