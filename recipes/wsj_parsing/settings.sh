# English constituency parsing on the WSJ part of the Penn Treebank (§6.3), sourced by this
# directory's scripts after recipes/lib/common.sh.
# shellcheck shell=bash
# shellcheck disable=SC2034  # read by the scripts that source this file
# CONFIG=paper (default): §6.3's setting. CONFIG=ours: the recommended configuration, the same shape
# with the decoder told which word it is at (--arch vaswani_pointer_parser) and constrained decoding
# (benchmarks/RESULTS.md, "Parsing: what each change bought").
CONFIG="${CONFIG:-paper}"
case $CONFIG in
  paper) PARSE_ARCH=vaswani_transformer_parse PARSE_DECODING=() ;;
  ours) PARSE_ARCH=vaswani_pointer_parser PARSE_DECODING=(--constrained-decoding) ;;
  *) die "CONFIG must be paper or ours, got '$CONFIG'" ;;
esac
if [[ $SMOKE == 1 ]]; then WORK_DIR="${WORK_DIR:-$ROOT/work/wsj_parsing-smoke}"; fi
WORK_DIR="${WORK_DIR:-$ROOT/work/wsj_parsing}"
DATA="$WORK_DIR/data"
CHECKPOINTS="$WORK_DIR/checkpoints"
if [[ $CONFIG == ours ]]; then CHECKPOINTS="$WORK_DIR/checkpoints-ours"; fi
if [[ $SMOKE == 1 ]]; then CHECKPOINTS="$CHECKPOINTS-smoke"; fi
