"""fairseq learning-rate schedulers (registered on import)."""
