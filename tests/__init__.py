"""The test suite, a package so that bench/, hack/ and the tests import its helpers by name.

``tests.k8s`` is the real local control plane, ``tests.gpu_nodes`` / ``tests.racks`` the fake GPU
Nodes, ``tests.hostile_specs`` the hostile-input generators, ``tests.unit.factories`` the unit
fixtures. Import them from the repository root (pytest's ``pythonpath = ["."]``, or
``python -m bench.xyz`` / ``python -m hack.xyz``); nothing edits the import path.
"""
