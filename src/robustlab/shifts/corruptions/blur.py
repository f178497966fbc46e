"""blur corruptions (to be filled)."""
