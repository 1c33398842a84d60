"""`python -m vaswani_plugin.convert ...`: the `vaswani-convert` command."""
from .cli import main

if __name__ == "__main__":
    main()
