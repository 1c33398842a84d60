"""fairseq's documented transformer commands through the real fairseq-train, with only the names
switched to ours, scaled down (small sizes given with fairseq's option names, a few updates, CPU):

- examples/translation/README.md, IWSLT'14 de-en: `--arch transformer_iwslt_de_en
  --share-decoder-input-output-embed`, fairseq's own `--lr-scheduler inverse_sqrt` and
  `--criterion label_smoothed_cross_entropy`, validation BLEU;
- examples/scaling_nmt/README.md, the big model: `--arch transformer_vaswani_wmt_en_de_big
  --share-all-embeddings ... --lr 0.0005 --lr-scheduler inverse_sqrt --warmup-updates 4000
  --warmup-init-lr 1e-07 ... --fp16`, with our scheduler and criterion switched in.
"""
import pytest

from helpers import eq3, run_tool, train_inner_values

# Each documented command's sizes come from its --arch; scaled down here with fairseq's own names.
SMALL = ["--encoder-layers", 1, "--decoder-layers", 1, "--encoder-embed-dim", 32, "--encoder-ffn-embed-dim", 64,
         "--encoder-attention-heads", 2, "--decoder-attention-heads", 2]
CPU_RUN = ["--max-update", 4, "--max-tokens", 500, "--cpu", "--seed", 1, "--log-format", "json", "--log-interval", 1,
           "--no-progress-bar", "--num-workers", 0, "--no-epoch-checkpoints"]
IWSLT14 = ["--share-decoder-input-output-embed", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
           "--clip-norm", 0.0, "--lr", 5e-4, "--lr-scheduler", "inverse_sqrt", "--warmup-updates", 4000,
           "--dropout", 0.3, "--weight-decay", 0.0001, "--label-smoothing", 0.1,
           "--eval-bleu", "--eval-bleu-args", '{"beam": 5, "max_len_a": 1.2, "max_len_b": 10}',
           "--eval-bleu-detok", "space", "--eval-bleu-remove-bpe", "--eval-bleu-print-samples",  # moses: not installed
           "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"]
SCALING_NMT_BIG = ["--share-all-embeddings", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", 0.0,
                   "--lr", 0.0005, "--lr-scheduler", "inverse_sqrt_warmup", "--warmup-updates", 4000,
                   "--warmup-init-lr", 1e-07, "--dropout", 0.3, "--weight-decay", 0.0,
                   "--criterion", "label_smoothed_xent", "--label-smoothing", 0.1, "--fp16"]


def fairseq_train(data, save_dir, arch, *flags):
    return run_tool("fairseq-train", data, "--user-dir", "vaswani_plugin", "--arch", arch, *SMALL, *flags, *CPU_RUN,
                    "--save-dir", save_dir)


def fairseq_inverse_sqrt(num_updates, peak, warmup, init=0.0):
    """The rate fairseq's inverse_sqrt sets after `num_updates` updates (written from its docstring)."""
    if num_updates < warmup:
        return init + num_updates * (peak - init) / warmup
    return peak * (warmup / num_updates) ** 0.5


@pytest.fixture(scope="module")
def iwslt14_fairseq_criterion(small_trained, tmp_path_factory):
    return fairseq_train(small_trained["bin"], tmp_path_factory.mktemp("iwslt"), "vaswani_transformer_tiny", *IWSLT14,
                         "--criterion", "label_smoothed_cross_entropy")


def test_iwslt14_command_with_fairseqs_scheduler_and_criterion(iwslt14_fairseq_criterion):
    proc = iwslt14_fairseq_criterion
    log = proc.stdout + proc.stderr
    assert "'_name': 'vaswani_transformer_tiny'" in log and "'d_model': 32" in log and "'d_ff': 64" in log
    assert "'untie_output_projection': False" in log and "'dropout': 0.3" in log
    assert "'_name': 'label_smoothed_cross_entropy'" in log and "'_name': 'inverse_sqrt'" in log
    lrs = train_inner_values(proc, "lr")
    assert sorted(lrs) == [1, 2, 3, 4]
    for n, lr in lrs.items():  # fairseq logs the rate set after update n
        assert lr == pytest.approx(fairseq_inverse_sqrt(n, 5e-4, 4000), rel=1e-3), n
    assert '"valid_bleu"' in log  # validation BLEU with beam 5, as the README asks


def test_iwslt14_our_criterion_matches_fairseqs_update_by_update(small_trained, tmp_path, iwslt14_fairseq_criterion):
    """Switching only the criterion: same seed, batches and schedule, so the same losses (ours is fused
    with the output projection; fairseq's is not)."""
    ours = fairseq_train(small_trained["bin"], tmp_path, "vaswani_transformer_tiny", *IWSLT14,
                         "--criterion", "label_smoothed_xent")
    for key in ("loss", "nll_loss"):
        a, b = train_inner_values(ours, key), train_inner_values(iwslt14_fairseq_criterion, key)
        assert sorted(a) == sorted(b) == [1, 2, 3, 4]
        assert all(a[n] == pytest.approx(b[n], abs=2e-3) for n in a), (key, a, b)  # logged to 3 decimals


def test_scaling_nmt_big_command_in_the_papers_mode_says_what_it_does_not_use(small_trained, tmp_path):
    proc = fairseq_train(small_trained["bin"], tmp_path, "vaswani_transformer_big", *SCALING_NMT_BIG)
    log = proc.stdout + proc.stderr
    assert "'_name': 'vaswani_transformer_big'" in log and "'share_all_embeddings': True" in log
    assert "'fp16': True" in log and '"loss_scale": "128"' in log  # fp16 on the CPU, fairseq's scaler
    assert log.count("--lr 0.0005 is not used") == 1 and log.count("--warmup-init-lr 1e-07 does not apply") == 1
    for n, lr in train_inner_values(proc, "lr").items():
        assert lr == pytest.approx(eq3(n + 1, 32, 4000), rel=1e-3), n


def test_scaling_nmt_big_command_with_lr_as_peak_warms_up_from_warmup_init_lr(small_trained, tmp_path):
    proc = fairseq_train(small_trained["bin"], tmp_path, "vaswani_transformer_big", *SCALING_NMT_BIG, "--lr-as-peak")
    log = proc.stdout + proc.stderr
    assert "is not used" not in log and "does not apply" not in log
    lrs = train_inner_values(proc, "lr")
    assert sorted(lrs) == [1, 2, 3, 4]
    for n, lr in lrs.items():  # fairseq's curve, one step on (§5.3 counts updates from 1)
        assert lr == pytest.approx(fairseq_inverse_sqrt(n + 1, 0.0005, 4000, init=1e-07), rel=1e-3), n
