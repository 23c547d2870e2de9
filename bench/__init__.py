"""Benchmarks: the pure core (``python -m bench.bench_core``) and the operator at scale.

The operator benchmark (``make bench-operator``, ``python -m bench.bench_operator``) is split by
what each part does: :mod:`bench.cluster` (bulk Nodes and DeepSeekServings, the two operators),
:mod:`bench.watch` (the resolution clock), :mod:`bench.measure` (probes and the start-up,
latency and restart runs), :mod:`bench.report` (medians, ratios, tables, plot);
:mod:`bench.bench_operator` is the command line over them. ``bench/noop_operator.py`` is the
kopf baseline and :mod:`bench.profile_operator` the per-object profiler.

Run from the repository root so that ``tests.k8s`` and ``deepseek_operator`` import by name.
"""
