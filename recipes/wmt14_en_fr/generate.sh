#!/usr/bin/env bash
# Average the last checkpoints (5 base, 20 big), translate newstest2014 with beam 4, lenpen 0.6,
# length input+50, and print sacreBLEU and tokenized BLEU (see recipes/README.md). MODEL as for
# train.sh. DRY_RUN=1 prints the commands; SMOKE=1 uses the smoke run's checkpoints.
set -euo pipefail
RECIPE=wmt14_en_fr/generate.sh
# shellcheck source=recipes/wmt14_en_fr/settings.sh
source "$(dirname "${BASH_SOURCE[0]}")/settings.sh"
# shellcheck source=recipes/lib/wmt14.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/wmt14.sh"
wmt_generate
