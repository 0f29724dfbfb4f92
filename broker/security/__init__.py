"""Authentication and authorization (broker side, protocol-neutral)."""
