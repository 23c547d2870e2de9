"""A real local Kubernetes control plane for the tests (see :mod:`k8s.cluster`)."""
