"""Developer scripts (generators, demo, probes), run from the repository root as ``python -m hack.xyz``."""
