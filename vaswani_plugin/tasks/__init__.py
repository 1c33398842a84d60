"""fairseq tasks (registered on import)."""
