"""fairseq criteria (registered on import)."""
