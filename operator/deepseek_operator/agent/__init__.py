"""agent package of deepseek-operator."""
