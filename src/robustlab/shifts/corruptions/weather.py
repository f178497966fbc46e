"""weather corruptions (to be filled)."""
