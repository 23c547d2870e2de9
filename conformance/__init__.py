"""Conformance with the real vLLM: code that runs inside each release's virtualenv (extract, oracle)
and the harness that drives it from the operator's (see docs/conformance.md).
"""
