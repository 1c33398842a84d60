#!/usr/bin/env bash
# Train vaswani_transformer_parse (§6.3: 4 layers, d_model 1024; CONFIG=ours: vaswani_pointer_parser,
# the same shape with the word pointer, and constrained decoding for the dev F1) on the prepared WSJ
# data with the base translation model's settings, keeping the checkpoint with the best F1 on
# section 22. NGPU
# (default: every GPU nvidia-smi lists), MAX_UPDATE (default 20000; the paper does not give it).
# DRY_RUN=1 prints the command; SMOKE=1 trains a tiny model on the CPU.
set -euo pipefail
RECIPE=wsj_parsing/train.sh
# shellcheck source=recipes/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
# shellcheck source=recipes/wsj_parsing/settings.sh
source "$(dirname "${BASH_SOURCE[0]}")/settings.sh"

require_tool fairseq-train
require_file "$DATA/parse_config.json"
arch=$PARSE_ARCH max_update=${MAX_UPDATE:-20000} warmup=4000 every=1000 gpu_flags=() shape=()
max_len_b=300
if [[ $SMOKE == 1 ]]; then
  # 4 updates (fp16 products run about 4x slower than fp32 on a CPU); 256 tokens hold the
  # synthetic treebank's longest tree (108 target tokens).
  note "SMOKE: the tiny shape, 4 updates of 256 tokens, one CPU process, fp16 as on GPUs, dev" \
    "trees of at most input + 20 tokens (an untrained model rarely stops before the length limit)"
  shape=(--encoder-layers 3 --decoder-layers 3 --d-model 256 --d-ff 1024 --attention-heads 4 --dropout 0.1)
  max_update=4 warmup=2 every=2 MAX_TOKENS=256 UPDATE_FREQ=1 max_len_b=20
  gpu_flags=(--fp16)  # fp16 on a CPU: vaswani_plugin/fairseq_fixes/fp16_cpu.py
else
  world=$(gpu_count)
  batch_for_world "$world"
  gpu_flags=(--fp16 --distributed-world-size "$world")
fi
# --eval-f1 decodes section 22 greedily at every validation; the best F1 picks the checkpoint.
run fairseq-train "$DATA" --user-dir "$USER_DIR" --task constituency_parsing --arch "$arch" "${shape[@]}" \
  --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 \
  --lr-scheduler inverse_sqrt_warmup --warmup-updates "$warmup" \
  --criterion label_smoothed_xent --label-smoothing 0.1 \
  --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$max_update" "${gpu_flags[@]}" \
  "${CPU_FLAGS[@]}" --eval-f1 --eval-f1-args "{\"beam\": 1, \"max_len_a\": 1, \"max_len_b\": $max_len_b}" \
  --best-checkpoint-metric f1 --maximize-best-checkpoint-metric \
  --validate-interval-updates "$every" --save-interval-updates "$every" --keep-interval-updates 1 \
  "${PARSE_DECODING[@]}" --no-epoch-checkpoints --save-dir "$CHECKPOINTS" --seed 1 --log-format simple --log-interval 100
note "$RECIPE: checkpoints in $CHECKPOINTS (checkpoint_best.pt: the best F1 on the dev set)"
