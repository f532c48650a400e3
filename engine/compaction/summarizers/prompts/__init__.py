"""Prompt templates of the summarizers (``*.txt``, ``string.Template`` syntax), read with importlib.resources."""
