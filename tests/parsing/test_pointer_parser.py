"""`--arch vaswani_pointer_parser`: the decoder input carries the encoder state of the next word to cover.

References: positions worked out by hand, and a plain-Python walk over the source pieces (U+2581 starts
a word) and the target symbols (the scheme's pre-terminals); incremental decoding against full
decoding, with beam reorders; the real fairseq-train and fairseq-generate."""
import os
import re
from argparse import Namespace

import pytest
import torch
from helpers import random_parser, run_tool

import vaswani_plugin
from vaswani_plugin.errors import ConfigError
from vaswani_plugin.models.pointer_parser import PointerParserModel
from vaswani_plugin.modules.word_pointer import covered_words, pointed_positions, word_start_table
from vaswani_plugin.parsing.linearize import delinearize
from vaswani_plugin.parsing.prepare import WORD_START
from vaswani_plugin.parsing.schemes import PRETERMINAL, get_scheme
from vaswani_plugin.parsing.trees import read_treebank

USER_DIR = vaswani_plugin.user_dir()
POINTER = ["--arch", "vaswani_pointer_parser", "--encoder-layers", "2", "--decoder-layers", "2", "--d-model", "32",
           "--d-ff", "64", "--attention-heads", "2", "--dropout", "0.1"]
PAD, EOS = 1, 2


def test_word_start_table_by_hand():
    # ids: 4 "▁the", 5 "▁do", 6 "g", 7 "▁barks"; row 0 left-padded (fairseq's default), row 1 right-padded
    word_start = torch.tensor([False, False, False, False, True, True, False, True])
    src = torch.tensor([[PAD, 4, 5, 6, 7, EOS],
                        [4, 7, EOS, PAD, PAD, PAD]])
    table = word_start_table(src, word_start, EOS)
    assert table.tolist() == [[1, 2, 4, 5, 5, 5],   # the(1) do(2)g barks(4), then EOS (5)
                              [0, 1, 2, 2, 2, 2]]   # the(0) barks(1), then EOS (2)
    # decoder inputs: EOS (S (NP XX XX )NP (VP XX ... with XX = 9, brackets 10-13
    prev = torch.tensor([[EOS, 10, 11, 9, 9, 12, 13, 9, 9]])
    covered = covered_words(prev, torch.arange(14) == 9)
    assert covered.tolist() == [[0, 0, 0, 1, 2, 2, 2, 3, 4]]
    assert covered_words(prev, torch.arange(14) == 9, last_only=True).tolist() == [[4]]
    # more pre-terminals than words (unconstrained decoding) still points at EOS
    assert pointed_positions(table[:1], covered).tolist() == [[1, 1, 1, 2, 4, 4, 4, 5, 5]]


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    return random_parser(str(tmp_path_factory.mktemp("pointer")), POINTER)


def _expected_position(src_symbols, target_prefix_symbols):
    """Plain Python: the position of the first piece of the word the next pre-terminal covers (EOS once
    every word is covered)."""
    starts = [i for i, s in enumerate(src_symbols) if s.startswith(WORD_START)]
    covered = sum(get_scheme("vinyals").classify(s).kind == PRETERMINAL for s in target_prefix_symbols)
    return starts[covered] if covered < len(starts) else src_symbols.index("</s>")


def test_decoder_input_adds_the_pointed_word_state(random_model):
    task, model, sample, _, _ = random_model
    net = sample["net_input"]
    src, prev = net["src_tokens"], net["prev_output_tokens"]
    with torch.no_grad():
        encoder_out = model.encoder(src, net["src_lengths"])
        got = model.decoder.decoder_input(prev, encoder_out)
        plain = model.decoder.embedding(prev)
    memory = encoder_out["memory"]
    checked = 0
    for b in range(src.size(0)):
        src_symbols = [task.src_dict[i] for i in src[b].tolist()]
        tgt_symbols = [task.tgt_dict[i] for i in prev[b].tolist()]
        for t in range(prev.size(1)):
            if prev[b, t] == task.tgt_dict.pad():
                continue
            position = _expected_position(src_symbols, tgt_symbols[1:t + 1])
            expected = plain[b, t] + model.decoder.pointer(memory[b, position])
            torch.testing.assert_close(got[b, t], expected, rtol=1e-5, atol=1e-5)
            checked += 1
    assert checked > 100


def test_incremental_decoding_equals_full_decoding_with_beam_reorders(random_model):
    _, model, sample, _, _ = random_model
    net = sample["net_input"]
    src, prev = net["src_tokens"], net["prev_output_tokens"]
    order = torch.arange(src.size(0)).repeat_interleave(2).flip(0)  # two "beams" a sentence, rows reordered
    with torch.no_grad():
        full, _ = model.decoder(prev[order], model.encoder(src[order], net["src_lengths"][order]))
        encoder_out = model.encoder.reorder_encoder_out(model.encoder(src, net["src_lengths"]), order)
        state = {}
        steps = [model.decoder(prev[order][:, :t + 1], encoder_out, incremental_state=state)[0]
                 for t in range(prev.size(1))]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)


def test_constrained_beam_search_gives_well_formed_trees(random_model):
    task, model, sample, gold, _ = random_model
    generator = task.build_generator([model], Namespace(beam=5, max_len_a=1, max_len_b=50))
    with torch.no_grad():
        hypos = generator.generate([model], sample)
    for row, sent_id in enumerate(sample["id"].tolist()):
        for hypo in hypos[row]:
            tokens = [task.target_dictionary[i] for i in hypo["tokens"].tolist()[:-1]]
            assert delinearize(tokens, gold[sent_id].words()).repairs == {}, tokens


def test_another_task_or_a_reversed_source_is_refused():
    with pytest.raises(ConfigError, match="needs --task constituency_parsing"):
        PointerParserModel.build_encoder_decoder(None, Namespace(), None, None)
    task = Namespace(word_start=torch.ones(3, dtype=torch.bool), target_symbols=object(), reverse_source=True)
    with pytest.raises(ConfigError, match="without --reverse-source"):
        PointerParserModel.build_encoder_decoder(None, task, None, None)


def test_trains_and_decodes_through_the_real_tools(random_model, tmp_path):
    _, _, _, gold, data = random_model
    save = str(tmp_path / "checkpoints")
    run_tool("fairseq-train", data, "--user-dir", USER_DIR, "--task", "constituency_parsing", *POINTER,
             "--criterion", "label_smoothed_xent", "--optimizer", "adam", "--lr", "3e-3", "--batch-size", "16",
             "--max-update", "8", "--save-dir", save, "--no-epoch-checkpoints", "--cpu", "--seed", "1",
             timeout=300)
    out = str(tmp_path / "test.trees")
    done = run_tool("fairseq-generate", data, "--user-dir", USER_DIR, "--task", "constituency_parsing", "--path",
                    os.path.join(save, "checkpoint_last.pt"), "--gen-subset", "test", "--constrained-decoding",
                    "--beam", "4", "--trees-output", out, "--cpu", timeout=300)
    assert f"malformed outputs 0/{len(gold)} " in done.stdout
    assert re.search(r"^Parse test: EVALB \(COLLINS\) F1 = [\d.]+", done.stdout, flags=re.M)
    assert [t.words() for t in read_treebank(out)] == [t.words() for t in gold]
    # plain beam search: fairseq's generator, which hands the pointer the beams' reorders
    done = run_tool("fairseq-generate", data, "--user-dir", USER_DIR, "--task", "constituency_parsing", "--path",
                    os.path.join(save, "checkpoint_last.pt"), "--gen-subset", "test", "--beam", "4", "--cpu",
                    "--max-len-a", "1", "--max-len-b", "20", timeout=300)
    assert ("beam search: fairseq's SequenceGenerator (PointerParserModel has its own encoder or decoder class)"
            in done.stderr)
    assert len(re.findall(r"^H-\d+\t", done.stdout, flags=re.M)) == len(gold)
