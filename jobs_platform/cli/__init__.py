"""The `jobs-platform` command line."""
