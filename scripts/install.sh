#!/usr/bin/env bash
# Create (or reuse) the virtualenv .venv at the repository root and install the plugin into it.
#
# torch==2.13.0 is installed first: on this CPU-only machine that takes the CPU build lying on disk,
# where a bare `torch` requirement would pull a multi-GB CUDA build. Then the plugin, editable,
# with its test extra; on Python >= 3.11 that brings fairseq-fixed, which builds for a few minutes.
# A stamp file skips the install when setup.py has not changed since the last one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"

command -v "$PYTHON" >/dev/null || { echo "install.sh: error: $PYTHON not found (set PYTHON=...)" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
  echo "install.sh: creating virtualenv $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.vaswani-plugin-installed"
want="$(sha256sum "$ROOT/setup.py" | cut -d' ' -f1) torch==$TORCH_VERSION"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "install.sh: $VENV is up to date" >&2
  exit 0
fi

"$VENV/bin/python" -m pip install "torch==$TORCH_VERSION"
"$VENV/bin/python" -m pip install -e "${ROOT}[test]"
echo "$want" > "$stamp"
echo "install.sh: installed vaswani-plugin into $VENV" >&2
