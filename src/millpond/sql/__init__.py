"""The SQL front end on sqlglot (PostgreSQL dialect)."""
