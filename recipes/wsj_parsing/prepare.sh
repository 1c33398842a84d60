#!/usr/bin/env bash
# Prepare the Penn Treebank's WSJ sections for --task constituency_parsing (§6.3): the standard
# splits (train 02-21, dev 22, test 23), a 16k sentencepiece vocabulary of the source words, and
# fairseq binaries (vaswani-parse-prepare). The treebank (LDC99T42) cannot be downloaded: set
# PTB_WSJ_DIR to its parsed/mrg/wsj directory (the one holding 00 ... 24). DRY_RUN=1 prints the
# commands; SMOKE=1 uses a synthetic treebank instead. Environment: WORK_DIR (default work/wsj_parsing).
set -euo pipefail
RECIPE=wsj_parsing/prepare.sh
# shellcheck source=recipes/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
# shellcheck source=recipes/wsj_parsing/settings.sh
source "$(dirname "${BASH_SOURCE[0]}")/settings.sh"

require_tool python vaswani-parse-prepare
if [[ $SMOKE == 1 ]]; then
  note "SMOKE: a synthetic treebank instead of the Penn Treebank"
  run python -m vaswani_plugin.parsing.synthetic_treebank --out "$WORK_DIR/treebank" --train 300 --valid 20 \
    --test 13
  train=("$WORK_DIR/treebank/train.trees") valid=("$WORK_DIR/treebank/valid.trees")
  test=("$WORK_DIR/treebank/test.trees")
else
  require_var PTB_WSJ_DIR
  train=() valid=() test=()
  for section in 02 03 04 05 06 07 08 09 10 11 12 13 14 15 16 17 18 19 20 21 22 23; do
    files=("$PTB_WSJ_DIR/$section"/wsj_*.mrg)
    if [[ $DRY_RUN != 1 && ! -f ${files[0]} ]]; then
      die "no $PTB_WSJ_DIR/$section/wsj_*.mrg; PTB_WSJ_DIR must be LDC99T42's parsed/mrg/wsj directory"
    fi
    case $section in
      22) valid=("${files[@]}") ;;
      23) test=("${files[@]}") ;;
      *) train+=("${files[@]}") ;;
    esac
  done
fi
run rm -rf "$DATA"
run vaswani-parse-prepare --train "${train[@]}" --valid "${valid[@]}" --test "${test[@]}" --out "$DATA" \
  --scheme vinyals --vocab-size 16000
note "$RECIPE: prepared data in $DATA (gold trees in $DATA/gold)"
