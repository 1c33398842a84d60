"""Build models the way fairseq-train does: argparse flags -> preset -> omegaconf -> build_model."""
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import build_model

import vaswani_plugin


def cli_config(arch, *flags, task="translation"):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, ["/nonexistent-data", "--task", task, "--arch", arch, "--user-dir", vaswani_plugin.user_dir(),
                 *flags])
    return convert_namespace_to_omegaconf(args)


def build_from_cli(arch, task, *flags):
    """Our model or fairseq's, built from command-line flags against a (fake) task."""
    cfg = cli_config(arch, *flags)
    return build_model(cfg.model, task)
