"""Benchmarks behind `jobs-platform bench`: the upsert writer and a backfill end to end.

Each benchmark is a plain function that returns the figures as a dict (the JSON shapes in
docs/ARCHITECTURE.md, "Contracts"); `jobs_platform.cli.bench` prints them. They run on
PostgreSQL only, in tables of their own (see `database.py`), and leave nothing behind.
"""
