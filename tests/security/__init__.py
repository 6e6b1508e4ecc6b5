"""Attacks by a local user on root's lockwarden, each withstood (docs/security.md)."""
