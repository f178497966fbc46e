"""digital corruptions (to be filled)."""
