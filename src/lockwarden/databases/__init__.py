"""Locks inside database servers: PostgreSQL advisory locks, writers blocked behind a table
lock, Liquibase's lock row, and MySQL/MariaDB user-level locks.

The drivers (psycopg 3, PyMySQL) are optional extras, imported only when a database lock is
configured. `observe` holds the typed facts a check saw, `postgres`/`mysql` read them through a
read-only session, `peers` finds a client process on this host, and `judge` turns the facts
into a Finding, purely.
"""
