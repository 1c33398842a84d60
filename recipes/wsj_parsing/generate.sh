#!/usr/bin/env bash
# Parse section 23 with the best checkpoint: beam 21, length penalty alpha 0.3, output length up to
# input + 300 (§6.3; CONFIG=ours adds constrained decoding), then score with the plugin's
# EVALB-compatible scorer (COLLINS.prm rules).
# DRY_RUN=1 prints the commands; SMOKE=1 uses the smoke run's checkpoint.
set -euo pipefail
RECIPE=wsj_parsing/generate.sh
# shellcheck source=recipes/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
# shellcheck source=recipes/wsj_parsing/settings.sh
source "$(dirname "${BASH_SOURCE[0]}")/settings.sh"

require_tool fairseq-generate vaswani-parse-score
require_file "$CHECKPOINTS/checkpoint_best.pt" "$DATA/gold/test.trees"
max_len_b=300
if [[ $SMOKE == 1 ]]; then
  note "SMOKE: trees of at most input + 20 tokens (an untrained model rarely stops before the length limit)"
  max_len_b=20
fi
# --required-batch-size-multiple 1: fairseq 0.12 otherwise drops a last batch smaller than 8.
run_to "$WORK_DIR/generate.out" fairseq-generate "$DATA" --user-dir "$USER_DIR" --task constituency_parsing \
  --path "$CHECKPOINTS/checkpoint_best.pt" --gen-subset test --beam 21 --lenpen 0.3 --max-len-a 1 \
  --max-len-b "$max_len_b" --batch-size 64 --required-batch-size-multiple 1 --trees-output "$WORK_DIR/test.trees" \
  "${PARSE_DECODING[@]}" "${CPU_FLAGS[@]}"
# The scorer refuses a tree file with fewer trees than the gold file.
run vaswani-parse-score --gold "$DATA/gold/test.trees" --pred "$WORK_DIR/test.trees" --summary-only
note "$RECIPE: trees in $WORK_DIR/test.trees, fairseq-generate output $WORK_DIR/generate.out"
