"""Built-in data: DeepSeek checkpoints and GPU products."""
