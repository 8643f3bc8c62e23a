"""What the records are: checkpoints, audit entries, ids, limits, errors, pipelines."""
