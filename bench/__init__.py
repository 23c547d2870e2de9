"""Benchmarks: the pure core (``python -m bench.bench_core``) and the operator at scale.

Run from the repository root (``make bench``, ``make bench-operator``) so that ``tests.k8s``
and ``deepseek_operator`` import by name.
"""
