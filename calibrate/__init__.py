"""Measures the real device and runs real passes; the only package that imports torch and pynvml."""
