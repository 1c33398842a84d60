#!/usr/bin/env bash
# Train on WMT14 en-fr with the paper's settings (see recipes/README.md). MODEL=big (default)
# or base; NGPU (default: every GPU nvidia-smi lists); for several machines NNODES, NODE_RANK,
# MASTER_ADDR (MASTER_PORT) on each; MAX_UPDATE (default: the paper's 100k base, 300k big).
# DRY_RUN=1 prints the command; SMOKE=1 trains a tiny model on the CPU.
set -euo pipefail
RECIPE=wmt14_en_fr/train.sh
# shellcheck source=recipes/wmt14_en_fr/settings.sh
source "$(dirname "${BASH_SOURCE[0]}")/settings.sh"
# shellcheck source=recipes/lib/wmt14.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/wmt14.sh"
wmt_train
