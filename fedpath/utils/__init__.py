"""Small shared utilities (atomic file writes, progress display)."""
