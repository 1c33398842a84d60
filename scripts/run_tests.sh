#!/usr/bin/env bash
# Install (scripts/install.sh) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/install.sh"
cd "$ROOT"
# Two test processes (pytest-xdist), whichever is free taking the next test: most of the suite's
# time is subprocesses starting fairseq (about 7 s of imports each, one core), so two tests run side
# by side well even on two cores (AMD EPYC Zen 1, 2 cores: 29.4 -> 16.4 minutes; Zen 4: 8.5). A later `-n 0`
# runs the tests in this process.
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest -n 2 --dist worksteal "$@"
