"""Console scripts installed with the package (see setup.py)."""
