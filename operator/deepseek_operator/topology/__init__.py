"""topology package of deepseek-operator."""
