from lockwarden.cli import run

raise SystemExit(run())
