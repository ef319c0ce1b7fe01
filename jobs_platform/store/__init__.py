"""The framework's state in the warehouse: plain SQLAlchemy, no Dagster."""
