"""Stand-in for Dagster's unpublished `dagster-test` package: `dagster_tests/conftest.py`
imports one function from it."""
