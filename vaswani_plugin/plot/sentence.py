"""One sentence through a checkpoint, for `vaswani-plot attention` (fairseq glue).

Text is split into the pieces the model was trained on by the sentencepiece model given with
`--spm-model`, else by `spm.model` found in the data directory or the directory above it (where
`recipes/quickstart.sh` writes it), and looked up in the checkpoint's dictionaries. The one
vocabulary serves both sides, as the paper's joint vocabulary (§5.1) and the quickstart's.
Without `--target`, the target is the model's own translation (beam 4, length penalty 0.6, §6.1).
"""
from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass
from typing import List, Optional

import torch

from ..checkpoint_io import load_checkpoint
from ..errors import ConfigError


@dataclass
class Sentence:
    """A source/target pair as the model sees it, with a label for every position."""

    src_tokens: torch.Tensor  # [1, S], ending with </s>
    prev_output_tokens: torch.Tensor  # [1, T], the target shifted right, starting with </s>
    source_labels: List[str]  # S pieces
    decoder_inputs: List[str]  # T pieces the decoder positions hold: </s>, then the target
    decoder_outputs: List[str]  # T pieces they predict: the target, then </s>


def find_spm_model(data: str, spm_model: Optional[str]) -> str:
    """--spm-model, else DATA/spm.model, else DATA/../spm.model."""
    if spm_model is not None:
        if not os.path.isfile(spm_model):
            raise ConfigError(f"--spm-model {spm_model}: no such file")
        return spm_model
    candidates = [os.path.join(data, "spm.model"), os.path.join(os.path.dirname(os.path.abspath(data)), "spm.model")]
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise ConfigError(f"no sentencepiece model in {' or '.join(candidates)}; pass --spm-model FILE, "
                      f"or --pretokenized when the text is already in the dictionary's tokens")


def load_model(path: str, data: str):
    """(model in eval mode, task) from a checkpoint and the data directory it was trained on."""
    from fairseq import checkpoint_utils

    # importing the package registers the model and tasks fairseq needs to rebuild the checkpoint
    from ..models.vaswani_transformer import VaswaniTransformerModel

    if not os.path.isfile(path):
        raise ConfigError(f"--path {path}: no such file")
    if not glob.glob(os.path.join(data, "dict.*.txt")):
        raise ConfigError(f"--data {data}: no dict.*.txt in it; expected fairseq-preprocess's output directory")
    load_checkpoint(path)  # one clear line for anything that is not a fairseq checkpoint
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    if not isinstance(models[0], VaswaniTransformerModel):
        raise ConfigError(f"--path {path}: a {type(models[0]).__name__}; vaswani-plot reads vaswani_transformer "
                          f"checkpoints (vaswani-convert --from-fairseq converts fairseq's transformer)")
    model = models[0].eval()
    return model, task


def _encode(text: str, dictionary, spm_processor, flag: str) -> List[int]:
    pieces = spm_processor.encode(text, out_type=str) if spm_processor is not None else text.split()
    if not pieces:
        raise ConfigError(f"{flag}: empty after splitting into tokens")
    ids = [dictionary.index(p) for p in pieces]
    unknown = [p for p, i in zip(pieces, ids) if i == dictionary.unk()]
    if unknown:
        print(f"vaswani-plot: warning: {flag}: not in the dictionary, shown as {dictionary.unk_word}: "
              f"{' '.join(unknown)}", file=sys.stderr)
    return ids


def _translate(model, task, src_tokens: torch.Tensor) -> List[int]:
    from fairseq.dataclass.configs import GenerationConfig

    generator = task.build_generator([model], GenerationConfig(beam=4, lenpen=0.6))
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": torch.tensor([src_tokens.size(1)])}}
    with torch.no_grad():
        best = task.inference_step(generator, [model], sample)[0][0]
    return best["tokens"].tolist()[:-1]  # without the final </s>


def prepare(model, task, source: str, target: Optional[str], spm_path: Optional[str]) -> Sentence:
    """Encode SOURCE (and TARGET, or the model's translation of SOURCE) as the model's inputs."""
    spm_processor = None
    if spm_path is not None:
        import sentencepiece

        spm_processor = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    src = _encode(source, src_dict, spm_processor, "--source") + [src_dict.eos()]
    src_tokens = torch.tensor([src])  # [1, S]
    tgt = (_encode(target, tgt_dict, spm_processor, "--target") if target is not None
           else _translate(model, task, src_tokens))
    prev = [tgt_dict.eos()] + tgt  # fairseq's decoder input: </s> then the target, shifted right
    return Sentence(src_tokens, torch.tensor([prev]), [src_dict[i] for i in src], [tgt_dict[i] for i in prev],
                    [tgt_dict[i] for i in tgt + [tgt_dict.eos()]])
