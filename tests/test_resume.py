"""A fairseq-train killed with SIGKILL in the middle of writing a checkpoint resumes from a loadable
`checkpoint_last.pt` and ends bit-identical to a run that was never interrupted (CPU, fixed seed,
dropout on: model, optimizer, scheduler, data position and RNG all come back).

To kill it mid-write for certain, a `sitecustomize` on the child's PYTHONPATH makes one chosen write
(the Nth `torch.save`, fairseq's atomic first file, or the Nth `shutil.copyfile`, the copy fairseq
makes to `checkpoint_last.pt`) stop after half its bytes and wait; the test kills the process then.
"""
import os
import signal
import subprocess
import time

import pytest
import torch
from helpers import BIN, ROOT, run_tool

SLOW_WRITE = '''
import io, os, shutil, time
what, nth = os.environ["SLOW_WRITE"].split(":")
calls = [0]

def _stall(data, target):
    f = open(target, "wb") if isinstance(target, (str, os.PathLike)) else target
    f.write(data[: len(data) // 2])
    f.flush()
    os.fsync(f.fileno())
    open(os.environ["SLOW_WRITE_MARKER"], "w").close()
    time.sleep(600)

def _is_nth():
    calls[0] += 1
    return calls[0] == int(nth)

if what == "torch.save":
    import torch
    _save = torch.save
    def save(obj, f, *args, **kwargs):
        if not _is_nth():
            return _save(obj, f, *args, **kwargs)
        buf = io.BytesIO()
        _save(obj, buf, *args, **kwargs)
        _stall(buf.getvalue(), f)
    torch.save = save
else:
    _copyfile = shutil.copyfile
    def copyfile(src, dst, *args, **kwargs):
        if not _is_nth():
            return _copyfile(src, dst, *args, **kwargs)
        with open(src, "rb") as f:
            _stall(f.read(), dst)
    shutil.copyfile = copyfile
'''


def train_args(data, save_dir, max_update):
    return [data, "--user-dir", "vaswani_plugin", "--arch", "vaswani_transformer", "--encoder-layers", 1,
            "--decoder-layers", 1, "--d-model", 32, "--d-ff", 64, "--attention-heads", 2, "--share-all-embeddings",
            "--dropout", 0.1, "--criterion", "label_smoothed_xent", "--optimizer", "adam",
            "--lr-scheduler", "inverse_sqrt_warmup", "--warmup-updates", 4, "--max-tokens", 300,
            "--max-update", max_update, "--save-interval-updates", 2, "--no-epoch-checkpoints",
            "--disable-validation", "--seed", 7, "--save-dir", save_dir, "--no-progress-bar", "--num-workers", 0]


@pytest.fixture(scope="module")
def uninterrupted(small_trained, tmp_path_factory):
    data, save_dir = small_trained["bin"], tmp_path_factory.mktemp("straight")
    run_tool("fairseq-train", *train_args(data, save_dir, 6))
    return data, torch.load(save_dir / "checkpoint_last.pt")


def kill_mid_write(args, slow_write, tmp_path):
    """Start fairseq-train, SIGKILL it while it is halfway through the chosen write."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_WRITE)
    marker = tmp_path / "writing"
    env = dict(os.environ, OMP_NUM_THREADS="1", SLOW_WRITE=slow_write, SLOW_WRITE_MARKER=str(marker),
               PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]))
    with open(tmp_path / "killed.log", "w") as log:  # a file, not a pipe nobody reads while waiting
        proc = subprocess.Popen([os.path.join(BIN, "fairseq-train"), *map(str, args)], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while not marker.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        alive = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    err = (tmp_path / "killed.log").read_text()
    assert alive and marker.exists(), f"fairseq-train never reached the write:\n{err[-3000:]}"
    assert proc.returncode == -signal.SIGKILL


def all_tensors(state):
    """Model parameters, then every optimizer-state tensor, by name."""
    out = {f"model.{k}": v for k, v in state["model"].items()}
    for pid, slots in state["last_optimizer_state"]["state"].items():
        out.update({f"optim.{pid}.{k}": v for k, v in slots.items() if torch.is_tensor(v)})
    return out


@pytest.mark.parametrize("slow_write", ["torch.save:2", "copyfile:2"], ids=["atomic-save", "copy-to-last"])
def test_killed_mid_save_resumes_bit_identical(uninterrupted, slow_write, tmp_path):
    data, straight = uninterrupted
    save_dir = tmp_path / "ckpt"
    # writes: update 2 -> torch.save(checkpoint_1_2.pt), copy to checkpoint_last.pt; update 4 -> the 2nd of each
    kill_mid_write(train_args(data, save_dir, 6), slow_write, tmp_path)

    last = torch.load(save_dir / "checkpoint_last.pt")  # whole: the one written at update 2
    assert last["optimizer_history"][-1]["num_updates"] == 2
    assert last["extra_state"]["train_iterator"]["iterations_in_epoch"] == 2

    proc = run_tool("fairseq-train", *train_args(data, save_dir, 6))
    assert "@ 2 updates" in proc.stdout + proc.stderr  # "Loaded checkpoint ... (epoch 1 @ 2 updates)"
    resumed = torch.load(save_dir / "checkpoint_last.pt")
    assert resumed["optimizer_history"][-1]["num_updates"] == straight["optimizer_history"][-1]["num_updates"] == 6
    scheduler = [s["optimizer_history"][-1]["lr_scheduler_state"] for s in (resumed, straight)]
    assert scheduler[0] == scheduler[1]
    assert resumed["extra_state"]["train_iterator"] == straight["extra_state"]["train_iterator"]
    ours, theirs = all_tensors(resumed), all_tensors(straight)
    assert ours.keys() == theirs.keys() and len(ours) > 10
    different = [name for name in ours if not torch.equal(ours[name], theirs[name])]
    assert not different, different


@pytest.mark.parametrize("atomic", [False, True], ids=["fairseq-copy", "plugin-copy"])
def test_a_copy_cut_short_leaves_the_old_checkpoint_last_whole(atomic, tmp_path, monkeypatch):
    """What the plugin's atomic copy prevents: fairseq's own copy, cut short, truncates its target."""
    import shutil

    from vaswani_plugin.fairseq_fixes import atomic_checkpoints

    src, dst = tmp_path / "checkpoint_1_4.pt", tmp_path / "checkpoint_last.pt"
    torch.save({"w": torch.zeros(10000)}, src)
    torch.save({"w": torch.arange(10000)}, dst)

    def copy_cut_short(a, b, *args, **kwargs):  # as a kill would leave it: half the bytes written
        with open(a, "rb") as f, open(b, "wb") as g:
            g.write(f.read()[:1000])
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "copyfile", copy_cut_short)
    copy = atomic_checkpoints.copy if atomic else atomic_checkpoints._fairseq_copy
    with pytest.raises(KeyboardInterrupt):
        copy(str(src), str(dst), True)
    if atomic:
        assert torch.equal(torch.load(dst)["w"], torch.arange(10000))  # the old checkpoint, whole
        assert sorted(os.listdir(tmp_path)) == ["checkpoint_1_4.pt", "checkpoint_last.pt"]  # no partial file left
    else:
        with pytest.raises(Exception, match="zip|central directory|ran out"):
            torch.load(dst)
