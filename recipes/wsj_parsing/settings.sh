# English constituency parsing on the WSJ part of the Penn Treebank (§6.3), sourced by this
# directory's scripts after recipes/lib/common.sh.
# shellcheck shell=bash
# shellcheck disable=SC2034  # read by the scripts that source this file
if [[ $SMOKE == 1 ]]; then WORK_DIR="${WORK_DIR:-$ROOT/work/wsj_parsing-smoke}"; fi
WORK_DIR="${WORK_DIR:-$ROOT/work/wsj_parsing}"
DATA="$WORK_DIR/data"
CHECKPOINTS="$WORK_DIR/checkpoints"
if [[ $SMOKE == 1 ]]; then CHECKPOINTS="$WORK_DIR/checkpoints-smoke"; fi
