"""deepseek-operator: serve DeepSeek V4/V4.1 with vLLM on Kubernetes, choosing the MoE backend from the hardware."""

__version__ = "0.1.0"
