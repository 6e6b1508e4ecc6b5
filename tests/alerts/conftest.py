"""Fixtures for the alert tests (servers and a tiny tmpfs live in helpers.py)."""

from .helpers import receiver, smtp, tiny_tmpfs

__all__ = ["receiver", "smtp", "tiny_tmpfs"]
