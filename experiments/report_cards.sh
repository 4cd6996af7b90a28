#!/usr/bin/env bash
# Every built-in normalisation's cpu card, one after another on this machine against one set of
# baselines (trained by the first card), each resumable: run it again after a stop and it goes
# on where it was. As each card lands, its report (report.md, report.json, accuracy.png,
# config.json, versions.json and record/: its seed keys and its runs' small json files) replaces
# results/report_cards/<name>/, the baselines' record replaces results/report_cards/baselines/,
# and REPORT_CARDS.md is generated again (every card's words with it).
#
#   [MAX_MINUTES=M] bash experiments/report_cards.sh [WORKDIR [NAME ...]]
#
# WORKDIR (default runs/report_cards) holds the cards' and the baselines' runs (checkpoints
# included: never committed); NAMEs default to every built-in card, softmax first. MAX_MINUTES
# gives each card's command --max_minutes: a card stopped by it exits 3 and this script stops
# with it (exit 3); the same command resumes where it stopped.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
work=${1:-runs/report_cards}
shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=(softmax ssmax stickbreaking softpick sparsemax entmax15 sigmoid sink dnas hnas sinkhorn
         nap non)
fi
budget=()
if [[ -n ${MAX_MINUTES:-} ]]; then budget=(--max_minutes="$MAX_MINUTES"); fi
for name in "${names[@]}"; do
  "$PY" -m normattn_jax.cli.card --config.attention.name="$name" --config.scale=cpu \
      --config.show_progress=False --workdir="$work/$name" "${budget[@]}"
  code=$?
  if ((code == 3)); then
    echo "== $name: stopped by --max_minutes=$MAX_MINUTES; run the same command to resume"
    exit 3
  elif ((code != 0)); then
    exit "$code"
  fi
  out=results/report_cards/$name
  rm -rf "$out"
  mkdir -p "$out"
  cp "$work/$name"/{report.md,report.json,accuracy.png,config.json,versions.json} "$out"/
  cp -r "$work/$name/record" "$out/record"
  baselines=$("$PY" -c "import json, os, sys; r = json.load(open(sys.argv[1])); \
print(os.path.normpath(os.path.join(sys.argv[2], r['baselines']['dir'], 'record')))" \
      "$out/report.json" "$work/$name")
  rm -rf results/report_cards/baselines
  cp -r "$baselines" results/report_cards/baselines
  "$PY" -m normattn_jax.cli.leaderboard || exit $?
done
