"""Runnable benchmarks: each prints a table and writes JSON under benchmarks/results/. ``--quick`` keeps them
small enough for the test suite, so they cannot rot."""
