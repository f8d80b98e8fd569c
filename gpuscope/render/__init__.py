"""Renderers: turn analyzer results into text for people (tables, names, numbers with units).
A result is computed once and drawn by the CLI, the TUI and the report alike."""
