"""deepseek-operator: serve DeepSeek V4/V4.1 with vLLM on Kubernetes, choosing the MoE backend from the hardware.

Layers, each importing only those below it (the import contracts in pyproject.toml):
:mod:`.cli` → :mod:`.commands` → :mod:`.controller` | :mod:`.agent` → :mod:`.plan` →
:mod:`.render` → :mod:`.engine` → :mod:`.nodes` → :mod:`.api` → :mod:`.catalog` →
:mod:`.names` | :mod:`.errors`. Everything from :mod:`.plan` down is pure.
"""

__version__ = "0.1.0"
