from lockwarden.cli.commands import run

raise SystemExit(run())
