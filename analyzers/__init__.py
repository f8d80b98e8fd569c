"""Analyzers: pure functions over the store that return plain data. They never print."""
