"""The TUI's screens, one module each, each with its own .tcss."""
