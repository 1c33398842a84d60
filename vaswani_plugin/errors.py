"""The one error type users see for bad flags or files."""
import os
import sys


class ConfigError(ValueError, SystemExit):
    """A contradiction in the user's flags or inputs.

    Library code can catch it as a ValueError. Left uncaught in a command-line tool it ends the
    process the way argparse does, with one line `PROG: error: MESSAGE` and exit status 1, instead
    of a traceback from deep inside fairseq.
    """

    def __init__(self, message: str):
        super().__init__(message)
        self.code = f"{os.path.basename(sys.argv[0] or 'python')}: error: {message}"
