"""The state journal on disk and the typed history folded from it."""
