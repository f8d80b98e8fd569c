"""The screens of the TUI: live, runs, run, compare, help."""
