"""fairseq models (registered on import)."""
