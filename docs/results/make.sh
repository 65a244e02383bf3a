#!/usr/bin/env bash
# The results pages of docs/results/, from the benchmarks' figures kept in docs/results/data/
# (each run's --json output, and a note on what the figures cannot say themselves).
#   docs/results/make.sh          # rewrite the pages in docs/results/
#   docs/results/make.sh DIR      # write them to DIR instead (test/test_results_pages.py compares)
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PY:-.venv/bin/python}
out=${1:-docs/results}
mkdir -p "$out"
data=docs/results/data
note() { cat "$data/$1.note.md"; }
"$py" docs/results/pages.py \
  $data/hil-px4-20.json --title "trained with the PX4 profile" --note "$(note hil-px4-20)" \
  $data/hil-px4-20-noprofile.json --title "trained without a profile" --note "$(note hil-px4-20-noprofile)" \
  $data/hil-ardupilot-10.json --title "the PX4-profile checkpoint on ArduCopter" \
  --note "$(note hil-ardupilot-10)" \
  $data/hil-px4-10-act.json --title "ACT, trained with the PX4 profile" --note "$(note hil-px4-10-act)" \
  $data/hil-px4-10-dp.json --title "Diffusion Policy, torch" --note "$(note hil-px4-10-dp)" \
  $data/hil-px4-10-dp-ort.json --title "Diffusion Policy, onnxruntime" --note "$(note hil-px4-10-dp-ort)" \
  > "$out/hil.md"
"$py" docs/results/pages.py \
  $data/sitl-failures-px4-10x4.json --title "the two PX4 scenarios after their changes" \
  --note "$(note sitl-failures-px4-10x4)" \
  $data/sitl-failures-apfence-10x4.json --title "ardupilot_fence after its premise check" \
  --note "$(note sitl-failures-apfence-10x4)" \
  $data/sitl-failures-10x4.json --title "ten runs, the goal's count" --note "$(note sitl-failures-10x4)" \
  $data/sitl-failures-3x4.json --title "the failure scenarios" --note "$(note sitl-failures-3x4)" \
  > "$out/sitl_failures.md"
"$py" docs/results/pages.py \
  $data/render-224.json --title "the real capture and the urban scene" --note "$(note render-224)" \
  $data/render-lod64.json --title "level of detail at 64x64, one numba thread" --note "$(note render-lod64)" \
  > "$out/render.md"
"$py" docs/results/pages.py $data/sim.json --note "$(note sim)" > "$out/sim.md"
"$py" docs/results/pages.py $data/vector_env.json --note "$(note vector_env)" > "$out/vector_env.md"
"$py" docs/results/pages.py $data/graph.json --note "$(note graph)" > "$out/graph.md"
"$py" docs/results/pages.py $data/policy.json --note "$(note policy)" > "$out/policy.md"
