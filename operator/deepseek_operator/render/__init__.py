"""render package of deepseek-operator."""
