"""``gpuscope run``: the wrapper and its contract with the program it runs.

- :mod:`.wrapper`: starts the program, samples telemetry meanwhile (:mod:`gpuscope.sampling`),
  forwards signals, and stores, ingests and analyzes the run;
- :mod:`.contract`: every environment variable and file name passed between the wrapper and
  the program, imported by both sides;
- :mod:`.bootstrap`: what runs inside the program (its ``sitecustomize`` and the profiler
  windows), loaded there under one top-level name each.

This ``__init__`` imports nothing: the program's side (:mod:`gpuscope.api`) passes through it
and must stay light.
"""
