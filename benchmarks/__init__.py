"""Benchmarks of jobs_platform, run by `bin/bench` (`python -m benchmarks` in the repository).

They measure the upsert writer, a backfill end to end and the operator commands on
PostgreSQL. Each benchmark is a plain function that returns the figures as a dict (the
JSON shapes in docs/ARCHITECTURE.md, "Contracts"); `benchmarks.__main__` prints them. They
run in tables of their own (see `database.py`) and leave nothing behind. They live beside
the package, not in its wheel, and nothing of the framework imports them.
"""

# The code location the benchmarks run unless `-m` names another: the orders example's.
EXAMPLE_MODULE = "orders_example.definitions"
