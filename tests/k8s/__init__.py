"""A real local Kubernetes control plane for the tests (see :mod:`tests.k8s.cluster`)."""
