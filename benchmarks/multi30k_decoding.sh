#!/usr/bin/env bash
# Benchmark: beam-search speed on real data, Multi30k en->de test2016, on CPU.
#
#   bash benchmarks/multi30k_decoding.sh
#
# Trains vaswani_transformer_tiny (3+3 layers, d_model 256: the shape of issue 6's CTranslate2
# orientation figure) on Multi30k's 29k training pairs for a fixed wall-clock budget, then runs
# benchmarks/beam_search.py (ours vs fairseq's transformer on the same weights) and, when
# ctranslate2 is installed, benchmarks/ctranslate2_anchor.py on test2016 (1,000 sentences). Both
# append their tables to benchmarks/RESULTS.md. The corpus is read in place, never copied into the
# repository; without it the script stops with a message.
#
# Environment: WORK_DIR (default: multi30k-work/ at the repository root), TRAIN_MINUTES (12),
# THREADS for training (all cores), BENCH_THREADS for decoding (1), REPEATS (3); MULTI30K and VOCAB
# as benchmarks/multi30k_prepare.sh (which makes the data-bin) takes them.
set -euo pipefail
RECIPE=multi30k_decoding.sh
# shellcheck source=recipes/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../recipes/lib/common.sh"
WORK_DIR="${WORK_DIR:-$ROOT/multi30k-work}"
TRAIN_MINUTES="${TRAIN_MINUTES:-12}"
THREADS="${THREADS:-$(nproc)}"
BENCH_THREADS="${BENCH_THREADS:-1}"
REPEATS="${REPEATS:-3}"

require_tool python fairseq-train
cd "$ROOT"  # --user-dir vaswani_plugin names this checkout's package
export WORK_DIR THREADS  # MULTI30K and VOCAB reach multi30k_prepare.sh, which has their defaults
bash "$ROOT/benchmarks/multi30k_prepare.sh"

note "fairseq-train vaswani_transformer_tiny for $TRAIN_MINUTES minutes"
rm -rf "$WORK_DIR/checkpoints"
OMP_NUM_THREADS="$THREADS" fairseq-train "$WORK_DIR/data-bin" --user-dir vaswani_plugin \
  --arch vaswani_transformer_tiny --share-all-embeddings --dropout 0.3 \
  --criterion label_smoothed_xent --label-smoothing 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 \
  --lr-scheduler inverse_sqrt_warmup --warmup-updates 400 --lr-scale 0.4 \
  --max-tokens 4096 --seed 1 --stop-time-hours "$(python -c "print($TRAIN_MINUTES / 60)")" \
  --save-dir "$WORK_DIR/checkpoints" --no-epoch-checkpoints --log-interval 50
checkpoint="$WORK_DIR/checkpoints/checkpoint_last.pt"

note "beam search: ours vs fairseq's transformer on the same weights"
python benchmarks/beam_search.py --checkpoint "$checkpoint" --data "$WORK_DIR/data-bin" --split test \
  --label "Multi30k test2016 (1000)" --batch-size 64 --threads "$BENCH_THREADS" --repeats "$REPEATS" --bf16

if python -c 'import ctranslate2' 2> /dev/null; then
  note "beam search: ours vs CTranslate2"
  python benchmarks/ctranslate2_anchor.py --checkpoint "$checkpoint" --data "$WORK_DIR/data-bin" --split test \
    --label "Multi30k test2016 (1000)" --batch-size 64 --threads "$BENCH_THREADS" --repeats "$REPEATS"
else
  note "ctranslate2 is not installed (pip install ctranslate2): skipping the CTranslate2 anchor"
fi
note "tables appended to $ROOT/benchmarks/RESULTS.md; work files in $WORK_DIR"
