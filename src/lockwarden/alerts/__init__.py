"""Decide what to say, render it, send it through apprise (or to Alertmanager), journal it."""
