#!/usr/bin/env bash
# Benchmark: constituency parsing (§6.3) on the Penn Treebank sample, on CPU.
#
#   bash benchmarks/ptb_sample_parsing.sh
#
# Trains on wsj_0001-wsj_0159 (3,396 trees) for a fixed wall-clock budget, then decodes the dev
# files wsj_0160-wsj_0179 (273 trees) with the paper's parsing settings (beam 21, lenpen 0.3,
# max length = input + 300), without and with constrained decoding, and prints a Markdown block with
# EVALB (COLLINS) F1 and the malformed-output rates, which it also appends to benchmarks/RESULTS.md
# (RESULTS=/dev/null: print only).
# The last checkpoint is decoded, so dev plays no part in choosing it.
#
# TEST_FILES (optional, space-separated .mrg paths) are prepared as the test split with the same
# vocabularies (one `prepare` run with --test), decoded with the recommended decoding (constrained,
# beam BEAM, lenpen 0.3, max length = input + 300), the trees written to $WORK_DIR/test.trees (gold
# next to them in $WORK_DIR/data/gold/test.trees), and one line printed:
#     test: F1 = X | recall R precision P | malformed M/N
#
# The treebank is read in place and never copied into the repository. Settings through the
# environment: PTB (the sample's directory), WORK_DIR (default: ptb-parsing-work/ at the repository
# root), THREADS (2), TRAIN_HOURS (0.5, the issue-17 budget), TEST_FILES, MAX_TOKENS, LR, WARMUP, VOCAB, BEAM, and the
# model's ARCH (vaswani_pointer_parser; vaswani_transformer is §6.3's decoder without the word pointer),
# LAYERS (per stack), D_MODEL, D_FF, HEADS, DROPOUT.
set -euo pipefail
RECIPE=ptb_sample_parsing
# shellcheck source=recipes/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../recipes/lib/common.sh"
PTB="${PTB:-$ROOT/../shared/data/ptb_sample}"
WORK_DIR="${WORK_DIR:-$ROOT/ptb-parsing-work}"
THREADS="${THREADS:-2}"
TRAIN_HOURS="${TRAIN_HOURS:-0.5}"
RESULTS="${RESULTS:-$ROOT/benchmarks/RESULTS.md}"
MAX_TOKENS="${MAX_TOKENS:-4096}"
LR="${LR:-2e-3}"
WARMUP="${WARMUP:-400}"
VOCAB="${VOCAB:-4000}"
BEAM="${BEAM:-21}"
ARCH="${ARCH:-vaswani_pointer_parser}"
LAYERS="${LAYERS:-2}"
D_MODEL="${D_MODEL:-128}"
D_FF="${D_FF:-512}"
HEADS="${HEADS:-4}"
DROPOUT="${DROPOUT:-0.3}"
TEST_FILES="${TEST_FILES:-}"
read -r -a test_files <<< "$TEST_FILES"
MODEL=(--arch "$ARCH" --encoder-layers "$LAYERS" --decoder-layers "$LAYERS" --d-model "$D_MODEL"
       --d-ff "$D_FF" --attention-heads "$HEADS" --dropout "$DROPOUT")

require_tool python fairseq-train fairseq-generate
export OMP_NUM_THREADS="$THREADS"
cd "$ROOT"
mkdir -p "$WORK_DIR"

train=()
dev=()
for file in "$PTB"/wsj_*.mrg; do
  [[ -f $file ]] || continue  # no match: the pattern itself
  number=${file##*/wsj_}
  number=$((10#${number%.mrg}))
  if ((number <= 159)); then train+=("$file"); elif ((number <= 179)); then dev+=("$file"); fi
done
((${#train[@]} > 0 && ${#dev[@]} > 0)) || die "no wsj_*.mrg files for train and dev in $PTB"
test_split=()
for file in "${test_files[@]}"; do
  [[ -f $file ]] || die "TEST_FILES: no file $file (expected space-separated .mrg paths)"
done
if ((${#test_files[@]} > 0)); then test_split=(--test "${test_files[@]}"); fi

note "preparing ${#train[@]} train, ${#dev[@]} dev and ${#test_files[@]} test files into $WORK_DIR/data"
rm -rf "$WORK_DIR/data"
python -m vaswani_plugin.parsing.prepare --train "${train[@]}" --valid "${dev[@]}" "${test_split[@]}" \
  --out "$WORK_DIR/data" --scheme vinyals --vocab-size "$VOCAB"

note "fairseq-train for $TRAIN_HOURS h on $THREADS threads"
rm -rf "$WORK_DIR/checkpoints"
train_start=$SECONDS
fairseq-train "$WORK_DIR/data" --user-dir vaswani_plugin --task constituency_parsing "${MODEL[@]}" \
  --criterion label_smoothed_xent --label-smoothing 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 \
  --lr-scheduler inverse_sqrt_warmup --warmup-updates "$WARMUP" --lr "$LR" --lr-as-peak \
  --max-tokens "$MAX_TOKENS" --stop-time-hours "$TRAIN_HOURS" --max-epoch 1000 --seed 1 \
  --save-dir "$WORK_DIR/checkpoints" --no-epoch-checkpoints --save-interval 5 \
  --log-interval 50 --log-format simple 2>&1 | tee "$WORK_DIR/train.log"
train_seconds=$((SECONDS - train_start))

DECODING=(--beam "$BEAM" --lenpen 0.3 --max-len-a 1 --max-len-b 300 --batch-size 32 --required-batch-size-multiple 1)
RECOMMENDED=(--constrained-decoding)  # the decoding the test split gets: 0% malformed, the best dev F1
decode() {  # decode SPLIT TREES OUT FLAGS...
  local split=$1 trees=$2 out=$3
  shift 3
  fairseq-generate "$WORK_DIR/data" --user-dir vaswani_plugin --task constituency_parsing \
    --path "$WORK_DIR/checkpoints/checkpoint_last.pt" --gen-subset "$split" "${DECODING[@]}" \
    --trees-output "$trees" "$@" > "$out"
}
for mode in plain constrained; do
  flags=()
  if [[ $mode == constrained ]]; then flags=("${RECOMMENDED[@]}"); fi
  note "fairseq-generate dev ${DECODING[*]} ${flags[*]} ($mode)"
  decode_start=$SECONDS
  decode valid "$WORK_DIR/dev.$mode.trees" "$WORK_DIR/generate.$mode.out" "${flags[@]}"
  echo "$((SECONDS - decode_start))" > "$WORK_DIR/decode_seconds.$mode"
done
if ((${#test_files[@]} > 0)); then
  note "fairseq-generate test ${DECODING[*]} ${RECOMMENDED[*]} -> $WORK_DIR/test.trees"
  decode_start=$SECONDS
  decode test "$WORK_DIR/test.trees" "$WORK_DIR/generate.test.out" "${RECOMMENDED[@]}"
  echo "$((SECONDS - decode_start))" > "$WORK_DIR/decode_seconds.test"
fi

scores() {  # scores GENERATE_OUTPUT SPLIT: F1 recall precision malformed decoded rate repairs, from its Parse lines
  python - "$1" "$2" <<'PY'
import re
import sys

text, split = open(sys.argv[1], encoding="utf-8").read(), sys.argv[2]
f1 = re.search(rf"^Parse {split}: EVALB \(COLLINS\) F1 = ([\d.]+) \| recall ([\d.]+) precision ([\d.]+)", text, re.M)
bad = re.search(rf"^Parse {split}: malformed outputs (\d+)/(\d+) \(([\d.]+)%\) \| repairs: (.*)", text, re.M)
print("\t".join(f1.groups() + bad.groups()))
PY
}
note "results (appended to $RESULTS)"
commit=$(git rev-parse --short HEAD)
if [[ -n $(git status --porcelain -- vaswani_plugin benchmarks) ]]; then commit="$commit + uncommitted changes"; fi
last_valid=$(grep "valid on 'valid' subset" "$WORK_DIR/train.log" | tail -n 1 | sed 's/.*| epoch \([0-9]*\) .*| loss \([0-9.]*\) .*num_updates \([0-9]*\).*/epoch \1, update \3, dev loss \2/')
{
cat <<EOF

## Parsing on the PTB sample: --arch $ARCH, $(date -u '+%Y-%m-%d %H:%M UTC')

Produced by \`benchmarks/ptb_sample_parsing.sh\`.

- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc --all) cores, OMP_NUM_THREADS=$THREADS
- torch $(python -c 'import torch; print(torch.__version__)'), fairseq $(python -c 'import fairseq; print(fairseq.__version__)' 2>/dev/null), commit $commit
- data: train ${#train[@]} files ($(wc -l < "$WORK_DIR/data/gold/train.trees") trees), dev ${#dev[@]} files ($(wc -l < "$WORK_DIR/data/gold/valid.trees") trees); vinyals scheme; sentencepiece BPE, $(python -c "import json; print(json.load(open('$WORK_DIR/data/parse_config.json'))['vocab_size'])") source pieces
- model: ${MODEL[*]}
- training: $train_seconds s wall clock (--stop-time-hours $TRAIN_HOURS), ended at $last_valid; Adam (0.9, 0.98, 1e-9), inverse_sqrt_warmup peak $LR after $WARMUP updates, ~$MAX_TOKENS tokens per batch, label smoothing 0.1
- decoding: last checkpoint, beam $BEAM, lenpen 0.3, max length = source pieces + 300

| dev (wsj_0160-0179) | EVALB F1 | recall | precision | malformed outputs | decode time |
|---|---|---|---|---|---|
EOF
for mode in plain constrained; do
  IFS=$'\t' read -r f1 recall precision malformed decoded rate repairs < <(scores "$WORK_DIR/generate.$mode.out" valid)
  echo "| $mode | $f1 | $recall | $precision | $malformed/$decoded ($rate%; $repairs) | $(cat "$WORK_DIR/decode_seconds.$mode") s |"
done
if ((${#test_files[@]} > 0)); then
  IFS=$'\t' read -r f1 recall precision malformed decoded _ _ < <(scores "$WORK_DIR/generate.test.out" test)
  echo "test: F1 = $f1 | recall $recall precision $precision | malformed $malformed/$decoded"
fi
} | tee -a "$RESULTS"
