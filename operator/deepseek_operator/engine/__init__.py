"""engine package of deepseek-operator."""
