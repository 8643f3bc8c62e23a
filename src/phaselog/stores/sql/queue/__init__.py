"""The queue of runs on PostgreSQL (workers): rows, submits, claims, recovery."""
