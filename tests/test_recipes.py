"""recipes/: the commands the paper's experiments run (DRY_RUN), every recipe end to end on the CPU
(SMOKE), the messages for a missing tool, variable or file, and shellcheck on every script."""
import glob
import os
import re
import shlex
import shutil
import subprocess

import pytest

from vaswani_plugin.models import presets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = os.path.join(ROOT, "recipes")
# The settings an environment could leak into a recipe.
RECIPE_VARS = ("DRY_RUN", "SMOKE", "NGPU", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "MODEL",
               "MAX_TOKENS", "UPDATE_FREQ", "MAX_UPDATE", "WORK_DIR", "PTB_WSJ_DIR", "CHECKPOINTS", "USER_DIR", "CONFIG")


def recipe(script, check=True, **env):
    """Run recipes/SCRIPT with `env` on one thread; returns the CompletedProcess."""
    full_env = {k: v for k, v in os.environ.items() if k not in RECIPE_VARS}
    full_env.update(OMP_NUM_THREADS="1", THREADS="1", **{k: str(v) for k, v in env.items()})
    proc = subprocess.run(["bash", os.path.join(RECIPES, script)], env=full_env, capture_output=True, text=True,
                          timeout=600, check=False)
    if check:
        assert proc.returncode == 0, f"{script} failed:\n{proc.stderr[-3000:]}"
    return proc


def dry_run(script, **env):
    """The commands SCRIPT would run, each as an argv list (split the way bash reads them)."""
    return [shlex.split(line.split(" > ")[0]) for line in recipe(script, DRY_RUN=1, **env).stdout.splitlines()]


def command(commands, program):
    """The one command of `commands` that runs `program` (a tool, or a module run with python -m)."""
    found = [c for c in commands if os.path.basename(c[0]) == program or c[:3] == ["python", "-m", program]]
    assert len(found) == 1, f"expected one {program} command in {commands}"
    return found[0]


def flag(argv, name):
    """The value after `name` in argv (None for a flag without a value, KeyError if absent)."""
    i = argv.index(name)
    return argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None


# ----------------------------------------------------------------------------- DRY_RUN: the paper's settings

PAPER_TRAINING = {"--optimizer": "adam", "--adam-betas": "(0.9, 0.98)", "--adam-eps": "1e-9",  # §5.3
                  "--lr-scheduler": "inverse_sqrt_warmup", "--warmup-updates": "4000",  # §5.3
                  "--criterion": "label_smoothed_xent", "--label-smoothing": "0.1"}  # §5.4
# §5.1: ~25000 source and ~25000 target tokens per batch; fairseq counts the longer side, padded.
PAPER_BATCH = 8 * 3584


@pytest.mark.parametrize("pair, model, arch, dropout, max_update, average", [
    # Table 3 (base, big), §5.2 (100k / 300k steps), §6.1 (last 5 / 20 checkpoints, P_drop 0.1 for en-fr big)
    ("en_de", "base", "vaswani_transformer_base", presets.PRESETS["vaswani_transformer_base"].dropout, "100000", "5"),
    ("en_de", "big", "vaswani_transformer_big", presets.PRESETS["vaswani_transformer_big"].dropout, "300000", "20"),
    ("en_fr", "big", "vaswani_transformer_big_en_fr", presets.PRESETS["vaswani_transformer_big_en_fr"].dropout, "300000", "20"),
])
def test_wmt_train_and_generate_carry_the_papers_settings(pair, model, arch, dropout, max_update, average):
    assert dropout == {"base": 0.1, "big": 0.3 if pair == "en_de" else 0.1}[model]  # Table 3, §6.1
    train = command(dry_run(f"wmt14_{pair}/train.sh", NGPU=8, MODEL=model), "fairseq-train")
    for name, value in dict(PAPER_TRAINING, **{"--arch": arch, "--max-update": max_update,
                                               "--keep-interval-updates": average}).items():
        assert flag(train, name) == value, name
    assert float(flag(train, "--dropout")) == dropout
    assert {"--share-all-embeddings", "--fp16", "--no-epoch-checkpoints"} <= set(train)
    assert flag(train, "--user-dir") == os.path.join(ROOT, "vaswani_plugin")
    assert 8 * int(flag(train, "--max-tokens")) * int(flag(train, "--update-freq")) == PAPER_BATCH
    assert flag(train, "--distributed-world-size") == "8"

    commands = dry_run(f"wmt14_{pair}/generate.sh", MODEL=model)
    average_cmd = command(commands, "vaswani-average-checkpoints")
    assert flag(average_cmd, "--num-update-checkpoints") == average
    generate = command(commands, "fairseq-generate")
    assert flag(generate, "--path") == flag(average_cmd, "--output")
    for name, value in {"--beam": "4", "--lenpen": "0.6", "--max-len-a": "1", "--max-len-b": "50",  # §6.1
                        "--gen-subset": "test", "--required-batch-size-multiple": "1",
                        "--remove-bpe": "sentencepiece"}.items():
        assert flag(generate, name) == value, name
    assert command(commands, "vaswani_plugin.cli.score_bleu")


def test_hydra_config_is_the_base_preset():
    """recipes/hydra/transformer_base.yaml spells the model out (fairseq-hydra-train resolves it before
    the plugin's defaults): every field is the base preset's, else the config's default, except
    share_all_embeddings, which the recipe sets as the paper does for its shared vocabulary (§3.4)."""
    import dataclasses

    from omegaconf import OmegaConf

    from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerConfig

    model = OmegaConf.to_container(OmegaConf.load(os.path.join(RECIPES, "hydra", "transformer_base.yaml")).model)
    assert model.pop("_name") == "vaswani_transformer"
    base = presets.preset_values(presets.PRESETS["vaswani_transformer_base"])
    defaults = {f.name: f.default for f in dataclasses.fields(VaswaniTransformerConfig)}
    assert base.keys() <= model.keys() <= defaults.keys()
    assert model.pop("share_all_embeddings") is True
    assert model == {name: base.get(name, defaults[name]) for name in model}


@pytest.mark.parametrize("ngpu, max_tokens, update_freq", [(1, 3584, 8), (2, 3584, 4), (4, 3584, 2), (16, 1792, 1)])
def test_fewer_gpus_raise_update_freq_to_keep_the_papers_batch(ngpu, max_tokens, update_freq):
    proc = recipe("wmt14_en_de/train.sh", DRY_RUN=1, NGPU=ngpu)
    train = command([shlex.split(line) for line in proc.stdout.splitlines()], "fairseq-train")
    assert (flag(train, "--max-tokens"), flag(train, "--update-freq")) == (str(max_tokens), str(update_freq))
    assert f"batch: {ngpu} GPU(s) x --max-tokens {max_tokens} x --update-freq {update_freq} = {PAPER_BATCH}" \
        in proc.stderr


def test_a_gpu_count_that_cannot_hold_the_papers_batch_is_refused():
    proc = recipe("wmt14_en_de/train.sh", check=False, DRY_RUN=1, NGPU=3)
    assert proc.returncode == 1
    assert "wmt14_en_de/train.sh: error: 3 GPUs cannot hold the paper's batch" in proc.stderr
    assert "set MAX_TOKENS and UPDATE_FREQ" in proc.stderr


def test_several_machines_go_through_torchrun():
    commands = dry_run("wmt14_en_de/train.sh", NGPU=8, NNODES=2, NODE_RANK=1, MASTER_ADDR="10.0.0.1")
    train = command(commands, "torchrun")
    assert train[:11] == ["torchrun", "--nnodes", "2", "--node_rank", "1", "--nproc_per_node", "8",
                          "--master_addr", "10.0.0.1", "--master_port", "29500"]
    assert os.path.basename(train[11]) == "fairseq-train"
    assert flag(train, "--distributed-world-size") == "16"
    assert 16 * int(flag(train, "--max-tokens")) * int(flag(train, "--update-freq")) == PAPER_BATCH
    proc = recipe("wmt14_en_de/train.sh", check=False, DRY_RUN=1, NGPU=8, NNODES=2, NODE_RANK=0)
    assert proc.returncode == 1 and "the variable MASTER_ADDR is not set" in proc.stderr


@pytest.mark.parametrize("pair, tgt, vocab", [("en_de", "de", "37000"), ("en_fr", "fr", "32000")])
def test_wmt_prepare_downloads_checks_and_preprocesses(pair, tgt, vocab):
    commands = dry_run(f"wmt14_{pair}/prepare.sh")
    downloads = [c for c in commands if c[0] == "curl"]
    assert len(downloads) == {"en_de": 3, "en_fr": 5}[pair]
    checks = [c for c in commands if c[0] == "verify_sha256"]
    for curl, verify in zip(downloads, checks):
        assert flag(curl, "--continue-at") == "-" and flag(curl, "--output").endswith(".part")
        assert verify[1] == flag(curl, "--output") and re.fullmatch(r"[0-9a-f]{64}", verify[2])
    assert [c for c in commands if c[0] == "sacrebleu"] == [
        ["sacrebleu", "-t", test_set, "-l", f"en-{tgt}", "--echo", side]
        for test_set in ("wmt13", "wmt14/full") for side in ("src", "ref")]
    spm = [c for c in commands if c[:3] == ["python", "-m", "vaswani_plugin.data.spm"]]
    assert [c[3] for c in spm] == ["train", "encode"]  # every split and language in one encode
    assert flag(spm[0], "--vocab-size") == vocab  # §5.1
    encoded = spm[1][spm[1].index("--input") + 1:spm[1].index("--output")]
    assert sorted(os.path.basename(path) for path in encoded) == sorted(
        f"{split}.{lang}" for split in ("train", "valid", "test") for lang in ("en", tgt))
    preprocess = command(commands, "fairseq-preprocess")
    assert "--joined-dictionary" in preprocess and flag(preprocess, "--workers") == "1"
    cleaning = [c for c in commands if c[:3] == ["python", "-m", "vaswani_plugin.data.check_parallel"]]
    assert [c[3] for c in cleaning] == ["clean", "check"]


def test_parsing_recipe_carries_the_papers_settings(tmp_path):
    for section in range(25):
        os.makedirs(tmp_path / f"{section:02d}")
        (tmp_path / f"{section:02d}" / f"wsj_{section:02d}01.mrg").write_text("")
    prepare = command(dry_run("wsj_parsing/prepare.sh", PTB_WSJ_DIR=tmp_path), "vaswani-parse-prepare")
    sections = {}
    for split in ("train", "valid", "test"):
        files = prepare[prepare.index(f"--{split}") + 1:]
        files = files[:next(i for i, arg in enumerate(files) if arg.startswith("--"))]
        sections[split] = sorted({os.path.basename(os.path.dirname(f)) for f in files})
    assert sections == {"train": [f"{s:02d}" for s in range(2, 22)], "valid": ["22"], "test": ["23"]}
    assert flag(prepare, "--vocab-size") == "16000"  # §6.3: a 16K vocabulary (WSJ only)

    train = command(dry_run("wsj_parsing/train.sh", NGPU=8), "fairseq-train")
    for name, value in dict(PAPER_TRAINING, **{"--arch": "vaswani_transformer_parse",
                                               "--task": "constituency_parsing"}).items():
        assert flag(train, name) == value, name
    assert "--fp16" in train

    commands = dry_run("wsj_parsing/generate.sh")
    generate = command(commands, "fairseq-generate")
    for name, value in {"--beam": "21", "--lenpen": "0.3", "--max-len-a": "1", "--max-len-b": "300",  # §6.3
                        "--required-batch-size-multiple": "1", "--gen-subset": "test"}.items():
        assert flag(generate, name) == value, name
    score = command(commands, "vaswani-parse-score")
    assert flag(score, "--pred") == flag(generate, "--trees-output")
    assert "--constrained-decoding" not in train + generate  # §6.3 decodes without constraints


def test_parsing_recipe_offers_the_recommended_configuration_by_name(tmp_path):
    train = command(dry_run("wsj_parsing/train.sh", NGPU=8, CONFIG="ours"), "fairseq-train")
    generate = command(dry_run("wsj_parsing/generate.sh", CONFIG="ours"), "fairseq-generate")
    assert flag(train, "--arch") == "vaswani_pointer_parser" and "--constrained-decoding" in train
    assert "--constrained-decoding" in generate and flag(generate, "--beam") == "21"
    paper = command(dry_run("wsj_parsing/train.sh", NGPU=8), "fairseq-train")
    assert flag(train, "--save-dir") == flag(paper, "--save-dir") + "-ours"  # the two never share checkpoints
    proc = recipe("wsj_parsing/train.sh", check=False, CONFIG="best", WORK_DIR=tmp_path)
    assert proc.returncode == 1 and "wsj_parsing/train.sh: error: CONFIG must be paper or ours, got 'best'" in proc.stderr


# ----------------------------------------------------------------------------- clear messages

def test_a_missing_tool_is_named():
    proc = recipe("wmt14_en_de/train.sh", check=False, VIRTUAL_ENV="/nonexistent", PATH="/usr/bin:/bin")
    assert proc.returncode == 1
    assert "wmt14_en_de/train.sh: error: fairseq-train not found on PATH" in proc.stderr


def test_a_missing_treebank_variable_or_directory_is_named(tmp_path):
    proc = recipe("wsj_parsing/prepare.sh", check=False, WORK_DIR=tmp_path)
    assert proc.returncode == 1 and "wsj_parsing/prepare.sh: error: the variable PTB_WSJ_DIR is not set" in proc.stderr
    proc = recipe("wsj_parsing/prepare.sh", check=False, WORK_DIR=tmp_path, PTB_WSJ_DIR=tmp_path)
    assert proc.returncode == 1 and f"no {tmp_path}/02/wsj_*.mrg; PTB_WSJ_DIR must be" in proc.stderr


@pytest.mark.parametrize("script, missing", [("wmt14_en_de/train.sh", "data-bin/dict.en.txt"),
                                             ("wmt14_en_fr/generate.sh", "checkpoints-big"),
                                             ("wsj_parsing/generate.sh", "checkpoints/checkpoint_best.pt")])
def test_a_missing_earlier_step_is_named(tmp_path, script, missing):
    proc = recipe(script, check=False, WORK_DIR=tmp_path, NGPU=8)
    assert proc.returncode == 1
    assert f"error: {tmp_path}/{missing} not found; run the earlier steps of this recipe first" in proc.stderr


def test_an_unknown_model_is_refused():
    proc = recipe("wmt14_en_de/train.sh", check=False, DRY_RUN=1, MODEL="huge")
    assert proc.returncode == 1 and "MODEL must be base or big, got 'huge'" in proc.stderr


# ----------------------------------------------------------------------------- shellcheck

SCRIPTS = sorted(glob.glob(os.path.join(RECIPES, "**", "*.sh"), recursive=True)
                 + glob.glob(os.path.join(ROOT, "scripts", "*.sh"))
                 + glob.glob(os.path.join(ROOT, "benchmarks", "*.sh")))


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_every_script_is_shellcheck_clean():
    # From the repository root: the scripts' `# shellcheck source=recipes/...` directives are relative to it.
    proc = subprocess.run(["shellcheck", "-x", *[os.path.relpath(s, ROOT) for s in SCRIPTS]], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_every_recipe_script_is_strict():
    for script in SCRIPTS:
        with open(script, encoding="utf-8") as handle:
            text = handle.read()
        if text.startswith("#!"):  # run, not sourced
            assert "\nset -euo pipefail\n" in text, script


# ----------------------------------------------------------------------------- SMOKE: end to end on the CPU

def test_wmt_recipe_runs_end_to_end_on_the_cpu(tmp_path):
    """en-de's three steps. en-fr's scripts are the same three lines around recipes/lib/wmt14.sh with
    other settings (wmt14_en_fr/settings.sh), which the DRY_RUN tests above check command by command:
    an en-fr SMOKE run (ten more processes, 80-100 s on a 2-core CPU) would run no other code."""
    for step in ("prepare", "train", "generate"):
        proc = recipe(f"wmt14_en_de/{step}.sh", SMOKE=1, WORK_DIR=tmp_path)
        if step == "train":  # the recipes' precision, on the CPU: fairseq's fp16 path with its loss scaler
            assert "'fp16': True" in proc.stderr + proc.stdout and "| loss_scale 128 |" in proc.stderr + proc.stdout
    lines = proc.stdout.splitlines()
    assert any(re.fullmatch(r"detokenized sacreBLEU on 29 sentences: \d+\.\d\d \(nrefs:1\|.*\)", x) for x in lines)
    assert any(re.fullmatch(r"tokenized BLEU \(13a tokens, compounds split, the paper's way\): \d+\.\d\d", x)
               for x in lines)
    assert "averaging 2 checkpoints" in proc.stderr
    hypotheses = (tmp_path / "test-big.hyp.de").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(hypotheses) == 29  # not a multiple of 8: no sentence dropped


@pytest.fixture(scope="module")
def parsing_smoke_dir(tmp_path_factory):
    """A WORK_DIR after the parsing recipe's SMOKE prepare.sh, which both configurations read (their
    checkpoints go to different directories, as in a real WORK_DIR)."""
    work = tmp_path_factory.mktemp("wsj_parsing-smoke")
    recipe("wsj_parsing/prepare.sh", SMOKE=1, WORK_DIR=work)
    return work


@pytest.mark.parametrize("config", ["paper", "ours"])
def test_parsing_recipe_runs_end_to_end_on_the_cpu(parsing_smoke_dir, config):
    for step in ("train", "generate"):
        proc = recipe(f"wsj_parsing/{step}.sh", SMOKE=1, WORK_DIR=parsing_smoke_dir, CONFIG=config)
        if step == "train":
            assert "'fp16': True" in proc.stderr + proc.stdout
            model = {"paper": "vaswani_transformer_parse", "ours": "vaswani_pointer_parser"}[config]
            assert f"'model': {{'_name': '{model}'," in proc.stderr + proc.stdout
    assert re.search(r"^Bracketing FMeasure\s+=\s+\d+\.\d\d$", proc.stdout, re.MULTILINE)
    assert len((parsing_smoke_dir / "test.trees").read_text(encoding="utf-8").splitlines()) == 13
