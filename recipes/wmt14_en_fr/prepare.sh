#!/usr/bin/env bash
# Download and prepare WMT14 en-fr (see recipes/README.md): training corpora (checked, resumable,
# never downloaded twice), newstest2013/2014, cleaning, a shared sentencepiece vocabulary,
# fairseq-preprocess --joined-dictionary. DRY_RUN=1 prints the commands; SMOKE=1 runs on the embedded
# corpus. Environment: WORK_DIR (default work/wmt14_en_fr), THREADS.
set -euo pipefail
RECIPE=wmt14_en_fr/prepare.sh
# shellcheck source=recipes/wmt14_en_fr/settings.sh
source "$(dirname "${BASH_SOURCE[0]}")/settings.sh"
# shellcheck source=recipes/lib/wmt14.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/wmt14.sh"
wmt_prepare
