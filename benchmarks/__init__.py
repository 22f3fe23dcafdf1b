"""Runnable benchmarks: each prints a table and writes JSON under benchmarks/results/. ``--quick`` keeps them
small enough for the test suite, so they cannot rot. The programs are this package's modules; the lab they run in
is ``lab/``, the renderers of the generated pages ``pages/``."""
