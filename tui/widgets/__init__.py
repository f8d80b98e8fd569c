"""Widgets the screens share (sparklines, the breakdown bar, the roofline plot)."""
