"""The SQL store: one core, two dialects (SQLite, PostgreSQL), numbered migrations."""
