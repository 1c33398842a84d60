#!/usr/bin/env bash
# Benchmark: does our model learn as much per update as fairseq's transformer? (issue 12)
#
#   bash benchmarks/multi30k_fidelity.sh
#
# Multi30k en->de (benchmarks/multi30k_prepare.sh: joint sentencepiece, 8k pieces), the same shape
# and training for both models: 3+3 layers, d_model 256, d_ff 1024, 4 heads, shared embeddings,
# dropout 0.1, label smoothing 0.1, Adam (0.9, 0.98) eps 1e-9, peak lr 1e-3 after 1000 warmup
# updates (fairseq's `inverse_sqrt`; ours `inverse_sqrt_warmup --lr-as-peak`), --max-tokens 4096,
# the same data-bin and seeds. Updates, not seconds, are equal: the runs share the machine, one
# thread each, JOBS at a time. The first seed trains to LONG updates and keeps its checkpoint at
# SHORT (fairseq reseeds every update from --seed and the update count, and neither schedule
# depends on --max-update, so that checkpoint is the SHORT-update run's); the other seeds stop at
# SHORT. Every checkpoint is scored the same way: fairseq-validate on valid (loss, nll), and
# fairseq-generate on test2016 with beam 4, lenpen 0.6, scored by vaswani_plugin.cli.score_bleu.
# The table goes to benchmarks/RESULTS.md; the curves of the LONG runs, drawn by `vaswani-plot
# curves`, to $WORK_DIR/fidelity_curves.png.
#
# Environment: MULTI30K, WORK_DIR (default multi30k-work/), SEEDS ("1 2 3"), SHORT (810),
# LONG (3000; 0 = no long run), JOBS (2), EVAL_THREADS (2), and those of multi30k_prepare.sh.
# A rerun skips the runs that finished and the checkpoints already scored; SCORE_ONLY=1 trains
# nothing and scores the checkpoints that exist (say, of a long run stopped early).
set -euo pipefail
RECIPE=multi30k_fidelity.sh
# shellcheck source=recipes/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../recipes/lib/common.sh"

WORK_DIR="${WORK_DIR:-$ROOT/multi30k-work}"
MULTI30K="${MULTI30K:-$ROOT/../shared/data/multi30k}"
SEEDS="${SEEDS:-1 2 3}"
SHORT="${SHORT:-810}"
LONG="${LONG:-3000}"
JOBS="${JOBS:-2}"
EVAL_THREADS="${EVAL_THREADS:-2}"
SCORE_ONLY="${SCORE_ONLY:-0}"
export WORK_DIR MULTI30K
require_tool fairseq-train fairseq-validate fairseq-generate vaswani-plot
bash "$ROOT/benchmarks/multi30k_prepare.sh"
cd "$ROOT"  # --user-dir vaswani_plugin names this checkout's package
RUNS="$WORK_DIR/fidelity"
mkdir -p "$RUNS"

SHAPE_FAIRSEQ=(--arch transformer --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256
  --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024
  --encoder-attention-heads 4 --decoder-attention-heads 4
  --criterion label_smoothed_cross_entropy --lr-scheduler inverse_sqrt)
SHAPE_OURS=(--arch vaswani_transformer_tiny --criterion label_smoothed_xent
  --lr-scheduler inverse_sqrt_warmup --lr-as-peak)
COMMON=(--share-all-embeddings --dropout 0.1 --label-smoothing 0.1 --optimizer adam
  --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 --lr 1e-3 --warmup-updates 1000 --max-tokens 4096
  --user-dir vaswani_plugin --log-format json --log-interval 10 --no-epoch-checkpoints)

# train MODEL SEED UPDATES: one run in $RUNS/MODEL-sSEED (skipped once done; an interrupted run
# resumes from its checkpoint_last.pt, as fairseq-train does, and its log grows, keeping the curve).
train() {
  local model=$1 seed=$2 updates=$3 dir="$RUNS/$1-s$2" shape
  if [[ $model == fairseq ]]; then shape=("${SHAPE_FAIRSEQ[@]}"); else shape=("${SHAPE_OURS[@]}"); fi
  if [[ -f $dir/done-$updates ]]; then return 0; fi
  mkdir -p "$dir"
  OMP_NUM_THREADS=1 fairseq-train "$WORK_DIR/data-bin" "${shape[@]}" "${COMMON[@]}" --seed "$seed" \
    --max-update "$updates" --save-interval-updates "$SHORT" --keep-interval-updates -1 \
    --save-dir "$dir" >> "$dir/$model-s$seed.log" 2>&1 ||
    die "training $model seed $seed failed; see $dir/$model-s$seed.log"
  touch "$dir/done-$updates"
}

jobs_list=()
first=${SEEDS%% *}
for seed in $SEEDS; do  # the short runs first, the long run (first seed) last
  if [[ $seed != "$first" ]]; then jobs_list+=("fairseq $seed $SHORT" "ours $seed $SHORT"); fi
done
updates=$SHORT
if (( LONG > SHORT )); then updates=$LONG; fi
jobs_list+=("fairseq $first $updates" "ours $first $updates")
if [[ $SCORE_ONLY != 1 ]]; then
  note "training ${#jobs_list[@]} runs, $JOBS at a time: ${jobs_list[*]}"
  running=0
  for job in "${jobs_list[@]}"; do
    # shellcheck disable=SC2086  # "MODEL SEED UPDATES" splits into three arguments
    train $job &
    running=$((running + 1))
    if (( running >= JOBS )); then wait -n; running=$((running - 1)); fi
  done
  wait
  for job in "${jobs_list[@]}"; do
    read -r model seed updates <<< "$job"
    [[ -f $RUNS/$model-s$seed/done-$updates ]] ||
      die "training $model seed $seed did not finish; see $RUNS/$model-s$seed"
  done
fi

# evaluate DIR CHECKPOINT UPDATES: valid loss/nll and test2016 BLEU into DIR/eval-UPDATES.txt (once).
evaluate() {
  local dir=$1 checkpoint=$2 name=$3 out="$1/eval-$3.txt"
  [[ -f $out ]] && return 0
  OMP_NUM_THREADS=$EVAL_THREADS fairseq-validate "$WORK_DIR/data-bin" --task translation \
    --user-dir vaswani_plugin --path "$checkpoint" --valid-subset valid --max-tokens 4096 \
    > "$dir/validate-$name.log" 2>&1 ||
    die "fairseq-validate failed on $checkpoint; see $dir/validate-$name.log"
  OMP_NUM_THREADS=$EVAL_THREADS fairseq-generate "$WORK_DIR/data-bin" --user-dir vaswani_plugin \
    --path "$checkpoint" --gen-subset test --beam 4 --lenpen 0.6 --batch-size 128 \
    --remove-bpe sentencepiece > "$dir/generate-$name.out" 2> "$dir/generate-$name.log" ||
    die "fairseq-generate failed on $checkpoint; see $dir/generate-$name.log"
  python -m vaswani_plugin.cli.score_bleu --generate-output "$dir/generate-$name.out" \
    --ref "$MULTI30K/test2016.de" --hyp-out "$dir/hyp-$name.de" > "$dir/bleu-$name.txt"
  { grep -h "valid on 'valid' subset" "$dir/validate-$name.log" | tail -n 1; cat "$dir/bleu-$name.txt"; } > "$out.part"
  mv "$out.part" "$out"
}

note "scoring every checkpoint (valid loss/nll, test2016 BLEU)"
for dir in "$RUNS"/*-s*; do
  for checkpoint in "$dir"/checkpoint_*_*.pt; do  # checkpoint_EPOCH_UPDATES.pt, every SHORT updates
    [[ -f $checkpoint ]] || continue
    updates=${checkpoint%.pt}
    evaluate "$dir" "$checkpoint" "${updates##*_}"
  done
  for done in "$dir"/done-*; do  # the last checkpoint, unless it is an interval one (done-UPDATES)
    [[ -f $done ]] || continue
    updates=${done##*-}
    if (( updates % SHORT != 0 )); then evaluate "$dir" "$dir/checkpoint_last.pt" "$updates"; fi
  done
done

note "table and curves"
python "$ROOT/benchmarks/fidelity_table.py" --runs "$RUNS" --short "$SHORT" --long "$LONG"
if [[ $LONG -gt $SHORT ]]; then
  vaswani-plot curves "$RUNS/fairseq-s$first/fairseq-s$first.log" "$RUNS/ours-s$first/ours-s$first.log" \
    --out "$WORK_DIR/fidelity_curves.png"
fi
