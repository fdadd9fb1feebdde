"""Small shared utilities (atomic file writes, progress display, ``with``-closing,
the subcommands' shared arguments)."""
