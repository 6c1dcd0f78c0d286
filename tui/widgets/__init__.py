"""The TUI's widgets: views that are given their data (attributes down, messages up)."""
