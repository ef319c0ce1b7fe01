"""The holds sensor: launches held partitions again once resumed or ready (Dagster part)."""
