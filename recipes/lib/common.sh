# Shared by the scripts of recipes/ and benchmarks/ (sourced, not run): the repository root, the
# venv, messages (note, die), checks (require_*) and the DRY_RUN/SMOKE modes. Each script sets RECIPE
# (the name in its error messages) before sourcing this file.
#
# Modes, from the environment:
#   DRY_RUN=1  print every command, shell-quoted, on stdout, and run nothing (no file or GPU checks);
#   SMOKE=1    run the same script on the CPU with the embedded corpus, a tiny model and one process.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DRY_RUN="${DRY_RUN:-0}"
SMOKE="${SMOKE:-0}"
# SMOKE stays on the CPU (one process) even on a machine with GPUs; fairseq-train/-generate take these.
# shellcheck disable=SC2034  # used by the scripts that source this file
if [[ $SMOKE == 1 ]]; then CPU_FLAGS=(--cpu); else CPU_FLAGS=(); fi

# The paper's batch (§5.1): about 25k source and 25k target tokens per update, on 8 GPUs. fairseq's
# --max-tokens bounds, per GPU, the padded size of the longer side (max(source, target) length x
# sentences), so 8 x 3584 = 28672 slots for the longer side; with length-bucketed batches a few
# percent of those are padding and the shorter side is ~10% shorter, which leaves ~25k real tokens
# per side. This is also the setting with which fairseq reproduced the paper (Ott et al. 2018,
# "Scaling Neural Machine Translation", 8 GPUs x 3584 tokens).
PAPER_GPUS=8
PAPER_MAX_TOKENS=3584

die() { echo "$RECIPE: error: $*" >&2; exit 1; }
note() { printf '\n==> %s\n' "$*" >&2; }

# use_venv DIR: activate the virtualenv DIR (scripts/install.sh makes one at .venv, or at $VENV).
use_venv() {
  # shellcheck disable=SC1091
  source "$1/bin/activate"
}

# The venv of the checkout, when the caller has none active (the recipes also run from a pip install).
if [[ -z "${VIRTUAL_ENV:-}" && -f "$ROOT/.venv/bin/activate" ]]; then
  use_venv "$ROOT/.venv"
fi
USER_DIR="${USER_DIR:-$ROOT/vaswani_plugin}"

require_tool() {
  local tool
  for tool in "$@"; do
    command -v "$tool" > /dev/null ||
      die "$tool not found on PATH; install the plugin (bash scripts/install.sh) and activate its venv"
  done
}

require_var() {
  local name
  for name in "$@"; do
    [[ -n "${!name:-}" ]] || die "the variable $name is not set; set it in the environment (see recipes/README.md)"
  done
}

# Files an earlier step should have made; not checked in DRY_RUN mode, where nothing is made.
require_file() {
  local path
  [[ $DRY_RUN == 1 ]] && return 0
  for path in "$@"; do
    [[ -e $path ]] || die "$path not found; run the earlier steps of this recipe first (see recipes/README.md)"
  done
}

# run CMD ARGS...: print the command (stdout in DRY_RUN mode, stderr otherwise) and run it unless DRY_RUN.
run() {
  if [[ $DRY_RUN == 1 ]]; then
    printf '%q ' "$@"; printf '\n'
  else
    { printf '+ '; printf '%q ' "$@"; printf '\n'; } >&2
    "$@"
  fi
}

# run_to FILE CMD ARGS...: the same with the command's stdout written to FILE (via FILE.part, renamed
# on success, so an interrupted step never leaves a FILE that looks complete).
run_to() {
  local out=$1
  shift
  if [[ $DRY_RUN == 1 ]]; then
    printf '%q ' "$@"; printf '> %q\n' "$out"
  else
    { printf '+ '; printf '%q ' "$@"; printf '> %q\n' "$out"; } >&2
    "$@" > "$out.part"
    mv "$out.part" "$out"
  fi
}

# The GPUs fairseq will use on this machine: NGPU if set, else what nvidia-smi lists.
gpu_count() {
  if [[ -n "${NGPU:-}" ]]; then
    echo "$NGPU"
  elif command -v nvidia-smi > /dev/null; then
    nvidia-smi -L | grep -c '^GPU' || true
  else
    echo 0
  fi
}

# batch_for_world WORLD: sets MAX_TOKENS and UPDATE_FREQ (unless the user set them) so that
# WORLD x MAX_TOKENS x UPDATE_FREQ = 8 x 3584, the paper's batch, and says so.
batch_for_world() {
  local world=$1 total=$((PAPER_GPUS * PAPER_MAX_TOKENS))
  ((world >= 1)) || die "no GPU found (nvidia-smi lists none); set NGPU, or run SMOKE=1 on the CPU"
  if [[ -z "${MAX_TOKENS:-}" && -z "${UPDATE_FREQ:-}" ]]; then
    if ((PAPER_GPUS % world == 0)); then
      MAX_TOKENS=$PAPER_MAX_TOKENS UPDATE_FREQ=$((PAPER_GPUS / world))
    elif ((world % PAPER_GPUS == 0 && total % world == 0)); then
      MAX_TOKENS=$((total / world)) UPDATE_FREQ=1
    else
      die "$world GPUs cannot hold the paper's batch of $PAPER_GPUS x $PAPER_MAX_TOKENS tokens exactly; set" \
        "MAX_TOKENS and UPDATE_FREQ with $world x MAX_TOKENS x UPDATE_FREQ close to $total"
    fi
  fi
  MAX_TOKENS="${MAX_TOKENS:-$PAPER_MAX_TOKENS}"
  UPDATE_FREQ="${UPDATE_FREQ:-1}"
  local effective=$((world * MAX_TOKENS * UPDATE_FREQ))
  note "batch: $world GPU(s) x --max-tokens $MAX_TOKENS x --update-freq $UPDATE_FREQ = $effective tokens" \
    "of the longer side per update (the paper's 8 GPUs: $total, ~25k source + ~25k target tokens)"
  if ((effective != total)); then
    note "warning: that is not the paper's batch of $total; results may differ from the paper's"
  fi
}
