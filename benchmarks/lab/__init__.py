"""The lab the benchmarks run in: the world they build (``world``), the log they judge on (``logs``), what a run
prints and writes (``results``); the apps the serve benchmark measures against (``floor``, ``realtime``) and its
in-process page measurements, impressions on and off (``in_process``); the fork benchmark's no-op job (``noop``); the
cost of experiments' arms to a worker (``arm_costs``); a prefeed of its own driven over HTTP by the served and
experiment benchmarks (``product``); worker hosts as network namespaces and the servers they share (``netns``,
``servers``); and two tools: the reshaped logs docs/replay.md measures on (``shapes``) and a fingerprint of one
saved world, to show a change of structure changed no result (``sameness``).

Kept free of imports: the fork benchmark's work horses import ``noop`` through it."""
