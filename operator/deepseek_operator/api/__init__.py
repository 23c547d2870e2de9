"""api package of deepseek-operator."""
