"""The command line: parser, commands, the `--once` orchestration, exit codes, entry point."""
