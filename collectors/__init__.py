"""Telemetry collectors (NVML, AMD SMI, host, replay) behind one small interface.

Collectors return rows; they know nothing of the store, the TUI or OpenTelemetry.
"""
