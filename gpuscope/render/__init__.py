"""Renderers: turn results into text for people (tables, names, numbers with units) and JSON
text. A result is computed once (analyzers, the store's read layer) and drawn by any face: the
CLI, the TUI, a report.

A renderer takes plain data (the JSON-able documents, dataclasses) and its options as
arguments (top, wide, width): never a store connection, never argparse, never the terminal
(the CLI measures the width and passes it), and it returns a string: it never prints.

table.py: the table fitter and the number/unit formatters; names.py: kernel names shortened and
kept distinct; json.py: the JSON text; one module per report (analysis, compare, runs, ingest,
rows (sql), run_summary, devices, ceiling, calibrate, specs).
"""
