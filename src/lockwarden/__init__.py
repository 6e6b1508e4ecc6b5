"""lockwarden: who holds each store lock, is it alive, for how long, and what to stop."""

__version__ = "0.1.0"
