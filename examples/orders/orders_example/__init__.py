"""The orders example: a user of jobs_platform, as a team's own code location would be.

`orders_example.definitions` is its code location (`dagster dev` in the repository's root
serves it through `workspace.yaml`); `orders-example seed` writes its landing files and
`orders-example demo` runs its backfill end to end.
"""
