"""Steering a backfill as a whole: pause, holds, readiness, the circuit breaker, the plan.

Each decision is made in the warehouse, so it holds on every host and launch path, and
none spends a partition's attempt budget. The pure modules (SQL over SQLAlchemy, no
Dagster) sit below the engine, whose gate reads them; the sensors sit with orchestration.
"""
