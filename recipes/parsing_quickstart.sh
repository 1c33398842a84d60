#!/usr/bin/env bash
# The CPU quickstart for English constituency parsing (§6.3), on the embedded synthetic treebank.
#
#   bash recipes/parsing_quickstart.sh
#
# 1. samples a Penn-Treebank-style treebank from the embedded PCFG (vaswani_plugin.parsing);
# 2. prepares it for --task constituency_parsing (linearized trees, sentencepiece source, binarized);
# 3. fairseq-train: a small Transformer (2+2 layers, d_model 128) with the paper's loss and schedule,
#    decoding the validation set as it goes (--eval-f1) and keeping the checkpoint with the best F1;
# 4. fairseq-generate on the test set with the paper's parsing settings (beam 21, lenpen 0.3,
#    max length = input + 300), without and with constrained decoding;
# 5. prints EVALB (COLLINS) F1 and the malformed-output rates.
#
# Assumes the virtual environment at .venv of the repository root (made by scripts/install.sh); it
# is activated when VIRTUAL_ENV is unset (recipes/lib/common.sh). Settings can be changed through the environment: WORK_DIR
# (default: parsing-work/ at the repository root), MAX_UPDATE, MAX_TOKENS, WARMUP, LR, BEAM, TRAIN,
# VALID, TEST (treebank sizes), THREADS.
set -euo pipefail
RECIPE=parsing_quickstart
# shellcheck source=recipes/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
WORK_DIR="${WORK_DIR:-$ROOT/parsing-work}"
MAX_UPDATE="${MAX_UPDATE:-2000}"
MAX_TOKENS="${MAX_TOKENS:-2048}"
WARMUP="${WARMUP:-200}"
LR="${LR:-3e-3}"
BEAM="${BEAM:-21}"
TRAIN="${TRAIN:-20000}"
VALID="${VALID:-300}"
TEST="${TEST:-500}"
THREADS="${THREADS:-$(nproc)}"

require_tool python fairseq-train fairseq-generate
export OMP_NUM_THREADS="$THREADS"
cd "$ROOT"  # so that --user-dir vaswani_plugin names the package of this checkout
mkdir -p "$WORK_DIR"
start=$SECONDS

note "sampling a synthetic treebank ($TRAIN/$VALID/$TEST trees) in $WORK_DIR/treebank"
python -m vaswani_plugin.parsing.synthetic_treebank --out "$WORK_DIR/treebank" \
  --train "$TRAIN" --valid "$VALID" --test "$TEST"

note "preparing $WORK_DIR/data (vinyals scheme, sentencepiece source)"
rm -rf "$WORK_DIR/data"
python -m vaswani_plugin.parsing.prepare --train "$WORK_DIR/treebank/train.trees" \
  --valid "$WORK_DIR/treebank/valid.trees" --test "$WORK_DIR/treebank/test.trees" \
  --out "$WORK_DIR/data" --scheme vinyals --vocab-size 16000

note "fairseq-train: $MAX_UPDATE updates of ~$MAX_TOKENS tokens, validation F1 every 500 updates"
rm -rf "$WORK_DIR/checkpoints"
fairseq-train "$WORK_DIR/data" --user-dir vaswani_plugin --task constituency_parsing \
  --arch vaswani_transformer --encoder-layers 2 --decoder-layers 2 --d-model 128 --d-ff 512 \
  --attention-heads 4 --dropout 0.1 \
  --criterion label_smoothed_xent --label-smoothing 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 \
  --lr-scheduler inverse_sqrt_warmup --warmup-updates "$WARMUP" --lr "$LR" --lr-as-peak \
  --max-tokens "$MAX_TOKENS" --max-update "$MAX_UPDATE" --seed 1 \
  --eval-f1 --eval-f1-args '{"beam": 1, "max_len_a": 1, "max_len_b": 100}' \
  --best-checkpoint-metric f1 --maximize-best-checkpoint-metric \
  --validate-interval-updates 500 --save-interval-updates 500 --keep-interval-updates 1 \
  --validate-interval 1000 --save-interval 1000 \
  --no-epoch-checkpoints --save-dir "$WORK_DIR/checkpoints" --log-interval 100 --log-format simple

for mode in plain constrained; do
  flags=()
  if [[ $mode == constrained ]]; then flags=(--constrained-decoding); fi
  note "fairseq-generate --beam $BEAM --lenpen 0.3 --max-len-a 1 --max-len-b 300 ($mode) on the test set"
  fairseq-generate "$WORK_DIR/data" --user-dir vaswani_plugin --task constituency_parsing \
    --path "$WORK_DIR/checkpoints/checkpoint_best.pt" --gen-subset test \
    --beam "$BEAM" --lenpen 0.3 --max-len-a 1 --max-len-b 300 --batch-size 64 \
    --required-batch-size-multiple 1 --trees-output "$WORK_DIR/test.$mode.trees" "${flags[@]}" \
    > "$WORK_DIR/generate.$mode.out"
done

note "results"
for mode in plain constrained; do
  trees=$(wc -l < "$WORK_DIR/test.$mode.trees")
  [[ $trees -eq $TEST ]] || die "$trees trees for $TEST test sentences ($mode)"
  echo "$mode decoding:"
  grep '^Parse test: \(EVALB\|malformed\)' "$WORK_DIR/generate.$mode.out" | sed 's/^/  /'
done
echo "sample (constrained): $(head -n 1 "$WORK_DIR/test.constrained.trees")"
echo "gold:                 $(head -n 1 "$WORK_DIR/data/gold/test.trees")"
echo >&2
echo "parsing_quickstart: done in $((SECONDS - start)) s; outputs in $WORK_DIR" >&2
