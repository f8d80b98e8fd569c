"""Fake vendor modules (pynvml, amdsmi, the amd-smi CLI) driven by tables of values."""
