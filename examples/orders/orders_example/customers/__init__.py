"""The customers example: re-sync one customer's order history per dynamic partition."""
