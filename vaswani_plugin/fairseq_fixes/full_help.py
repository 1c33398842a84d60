"""`--help` lists the options of the chosen `--arch`, `--task`, `--criterion`, `--optimizer` and
`--lr-scheduler`, not only the generic ones.

fairseq 0.12 parses a command line twice (`options.parse_args_and_arch`): once to learn the chosen
model, task, criterion, optimizer and scheduler, then again after adding their options. `-h` is
acted on in the first pass, so `fairseq-train --arch vaswani_transformer_tiny --help` exits before
any model option (`--d-model`, fairseq's `--encoder-embed-dim`, ...) or `--lr-scheduler` option
(`--warmup-updates`) exists, and never shows them.

When the plugin is loaded and the command line asks for help, the first pass runs without `-h`
(its output and errors silenced: `fairseq-train --help` alone has no data directory), then the
parser, by now holding every option, prints the help. Without `-h` nothing changes.
"""
import contextlib
import io
import sys

from fairseq import options

_fairseq_parse_args_and_arch = options.parse_args_and_arch
_HELP = ("-h", "--help")


def parse_args_and_arch(parser, input_args=None, parse_known=False, suppress_defaults=False, modify_parser=None):
    """fairseq's `parse_args_and_arch`; with -h, the help of every option the command line selects."""
    argv = sys.argv[1:] if input_args is None else list(input_args)
    if not any(a in _HELP for a in argv):
        return _fairseq_parse_args_and_arch(parser, input_args, parse_known, suppress_defaults, modify_parser)
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:  # adds the selected model's, task's, ... options to `parser`
            _fairseq_parse_args_and_arch(parser, [a for a in argv if a not in _HELP], True, False, modify_parser)
        except SystemExit:  # a missing data directory, a bad flag: help for what was added so far
            pass
    parser.parse_known_args(argv)  # prints the help and exits


options.parse_args_and_arch = parse_args_and_arch
