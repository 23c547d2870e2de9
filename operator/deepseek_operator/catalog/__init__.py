"""catalog package of deepseek-operator."""
