"""The Textual terminal UI. Only this package imports Textual, and only ``gpuscope tui`` imports it."""
