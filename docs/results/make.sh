#!/usr/bin/env bash
# The results pages of docs/results/, from the benchmarks' figures kept in docs/results/data/
# (each run's figures.json, and a note on what the figures cannot say themselves).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PY:-.venv/bin/python}
note() { cat "docs/results/data/$1.note.md"; }
"$py" bench/results.py \
  docs/results/data/hil-px4-20.json --title "trained with the PX4 profile" --note "$(note hil-px4-20)" \
  docs/results/data/hil-px4-20-noprofile.json --title "trained without a profile" --note "$(note hil-px4-20-noprofile)" \
  docs/results/data/hil-ardupilot-10.json --title "the PX4-profile checkpoint on ArduCopter" \
  --note "$(note hil-ardupilot-10)" \
  > docs/results/hil.md
"$py" bench/results.py \
  docs/results/data/sitl-failures-3x4.json --title "the failure scenarios" --note "$(note sitl-failures-3x4)" \
  > docs/results/sitl_failures.md
