"""The Ledger and Run and their services: writes, reads, run state, progress, gates, audit, retention, verify."""
