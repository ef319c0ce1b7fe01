"""The Dagster side: translates between Dagster and the plain core, holds no rules of its own."""
