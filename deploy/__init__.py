"""Deployment tooling: the one-machine stack of the distributed topology."""
