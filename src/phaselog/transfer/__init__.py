"""Moving records between stores: export, import, copy (checked like a write)."""
