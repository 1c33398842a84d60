#!/usr/bin/env bash
# Multi30k en->de as a fairseq data-bin, shared by the Multi30k benchmarks:
#
#   bash benchmarks/multi30k_prepare.sh
#
# Checks the corpus strictly (one line naming file and line on bad input), learns a joint
# sentencepiece vocabulary on train.en + train.de, encodes train / val / test2016 and runs
# fairseq-preprocess with a joined dictionary into $WORK_DIR/data-bin (splits train, valid, test).
# The corpus is read in place, never copied into the repository. A stamp skips the work when the
# same corpus directory and vocabulary size were prepared before.
#
# Environment: MULTI30K (the corpus directory; default ../shared/data/multi30k beside the checkout),
# WORK_DIR (default multi30k-work/ at the repository root), VOCAB (8000), THREADS (all cores).
set -euo pipefail
RECIPE=multi30k_prepare.sh
# shellcheck source=recipes/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../recipes/lib/common.sh"

MULTI30K="${MULTI30K:-$ROOT/../shared/data/multi30k}"
WORK_DIR="${WORK_DIR:-$ROOT/multi30k-work}"
VOCAB="${VOCAB:-8000}"
THREADS="${THREADS:-$(nproc)}"

for split in train val test2016; do
  for lang in en de; do
    [[ -f "$MULTI30K/$split.$lang" ]] || die "$MULTI30K/$split.$lang not found; set MULTI30K to the corpus directory"
  done
done
require_tool fairseq-preprocess
mkdir -p "$WORK_DIR"
stamp="$WORK_DIR/data-bin/.prepared"
want="$(cd "$MULTI30K" && pwd) vocab=$VOCAB"
if [[ -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
  note "Multi30k already prepared in $WORK_DIR/data-bin"
  exit 0
fi

note "checking and encoding Multi30k (joint sentencepiece, $VOCAB pieces)"
cd "$ROOT"
python -m vaswani_plugin.data.check_parallel check "$MULTI30K/train.en" "$MULTI30K/train.de" \
  "$MULTI30K/val.en" "$MULTI30K/val.de" "$MULTI30K/test2016.en" "$MULTI30K/test2016.de"
python -m vaswani_plugin.data.spm train --inputs "$MULTI30K/train.en" "$MULTI30K/train.de" \
  --model-prefix "$WORK_DIR/spm" --vocab-size "$VOCAB"
python -m vaswani_plugin.data.spm encode --model "$WORK_DIR/spm.model" \
  --input "$MULTI30K"/{train,val,test2016}.{en,de} --output "$WORK_DIR"/{train,valid,test}.sp.{en,de}
rm -rf "$WORK_DIR/data-bin"
fairseq-preprocess --source-lang en --target-lang de --trainpref "$WORK_DIR/train.sp" \
  --validpref "$WORK_DIR/valid.sp" --testpref "$WORK_DIR/test.sp" --destdir "$WORK_DIR/data-bin" \
  --joined-dictionary --workers "$THREADS"
echo "$want" > "$stamp"
