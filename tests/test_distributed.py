"""Two CPU processes (torchrun, gloo) train with gradients all-reduced across ranks.

fairseq gives rank r the batches r, r + 2, r + 4, ... of the epoch and sums the gradients of the
ranks before each update, so two processes take the same steps as one process that accumulates two
consecutive batches (`--update-freq 2`). The test compares the parameters after 3 updates of the
two runs (dropout 0, fixed seed): they can only agree if rank 1 computed its batches and its
gradients reached rank 0.

fairseq's own spawning (`--distributed-world-size 2` alone) counts CUDA devices and starts nothing
on a CPU-only machine, so torchrun starts the processes; the per-rank wrapper passes
`--distributed-rank $RANK` and `--distributed-init-method env://` (fairseq would otherwise infer
them from torchrun's variables, dividing by the number of GPUs, zero here). On CPU the DDP backend
is `legacy_ddp`: fairseq hands torch's DistributedDataParallel a device id, which torch refuses for
CPU modules; on GPUs the default `pytorch_ddp` takes the same torchrun/env:// path.
"""
import os
import socket

import torch
from helpers import BIN, run_tool

UPDATES = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(data, save_dir, *extra):
    return [data, "--user-dir", "vaswani_plugin", "--arch", "vaswani_transformer", "--encoder-layers", 1,
            "--decoder-layers", 1, "--d-model", 32, "--d-ff", 64, "--attention-heads", 2, "--share-all-embeddings",
            "--dropout", 0, "--criterion", "label_smoothed_xent", "--optimizer", "adam", "--lr", 1e-3,
            "--batch-size", 8, "--max-tokens", 100000, "--max-update", UPDATES, "--disable-validation",
            "--no-epoch-checkpoints", "--seed", 3, "--save-dir", save_dir, "--cpu", "--num-workers", 0,
            "--log-format", "simple", "--log-interval", 1, "--no-progress-bar", *extra]


def test_two_processes_equal_one_with_update_freq_2(small_trained, tmp_path):
    data = small_trained["bin"]
    wrapper = tmp_path / "rank.sh"
    wrapper.write_text(f'#!/bin/sh\n# one rank of torchrun: fairseq-train with its rank\n'
                       f'exec "{os.path.join(BIN, "fairseq-train")}" "$@" --distributed-rank "$RANK"\n')
    wrapper.chmod(0o755)
    two = run_tool("torchrun", "--no-python", "--nproc_per_node", 2, "--master_addr", "127.0.0.1",
                   "--master_port", free_port(), wrapper,
                   *train_args(data, tmp_path / "two", "--distributed-world-size", 2, "--distributed-no-spawn",
                               "--distributed-init-method", "env://", "--distributed-backend", "gloo",
                               "--ddp-backend", "legacy_ddp"))
    run_tool("fairseq-train", *train_args(data, tmp_path / "one", "--update-freq", 2))

    log = two.stdout + two.stderr
    assert "distributed init (rank 0)" in log and "distributed init (rank 1)" in log
    assert "training on 2 devices" in log
    states = [torch.load(tmp_path / run / "checkpoint_last.pt") for run in ("two", "one")]
    assert [s["optimizer_history"][-1]["num_updates"] for s in states] == [UPDATES, UPDATES]
    a, b = (s["model"] for s in states)
    assert a.keys() == b.keys()
    for name in a:  # Adam moved every weight by ~1e-3 per update; a batch missing would show far above 1e-6
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=name)
