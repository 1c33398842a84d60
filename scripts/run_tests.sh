#!/usr/bin/env bash
# Install (scripts/install.sh) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/install.sh"
cd "$ROOT"
# Two test processes (pytest-xdist), whichever takes the next test when it is free: most of the
# suite's time is subprocesses that start fairseq (about 7 s of imports each) and wait on each
# other, so two run side by side well even on two cores (AMD EPYC Zen 1, 2 cores: 29.4 -> 20.5
# minutes). `-n 0` after it runs the tests in this process.
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest -n 2 --dist worksteal "$@"
