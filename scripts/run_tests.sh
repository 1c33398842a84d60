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
# Each test process's torch has an OpenMP thread per core, so two of them oversubscribe the cores, and
# libgomp's threads spin after every parallel region: the spinning threads of one process take the
# cores the other needs. Passive waiting (unless the caller sets a policy) changes no result here:
# AMD EPYC Zen 3, 2 cores, six in-process test files (184 tests) on two processes: 67-70 s -> 49-51 s,
# CPU time 112-122 s -> 73-76 s.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest -n 2 --dist worksteal "$@"
