"""Guarded removal of stale locks (opt-in, remove_stale)."""
