"""extra corruptions (to be filled)."""
