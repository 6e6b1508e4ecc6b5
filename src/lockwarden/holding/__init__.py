"""`lockwarden hold` and `lockwarden.hold()`: take a lock with a record, supervise the command."""
