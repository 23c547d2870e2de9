"""controller package of deepseek-operator."""
