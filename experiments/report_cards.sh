#!/usr/bin/env bash
# Every built-in normalisation's cpu card, one after another on this machine against one set of
# baselines (trained by the first card), each resumable: run it again after a stop and it goes
# on where it was. As each card lands, its report (report.md, report.json, accuracy.png,
# config.json, versions.json) replaces results/report_cards/<name>/ and REPORT_CARDS.md is
# generated again.
#
#   bash experiments/report_cards.sh [WORKDIR [NAME ...]]
#
# WORKDIR (default runs/report_cards) holds the cards' and the baselines' runs (checkpoints
# included: never committed); NAMEs default to every built-in card, softmax first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
work=${1:-runs/report_cards}
shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=(softmax ssmax stickbreaking softpick sparsemax entmax15 sigmoid sink dnas hnas sinkhorn
         nap non)
fi
for name in "${names[@]}"; do
  "$PY" normattn-card --config.attention.name="$name" --config.scale=cpu \
      --config.show_progress=False --workdir="$work/$name"
  out=results/report_cards/$name
  rm -rf "$out"
  mkdir -p "$out"
  cp "$work/$name"/{report.md,report.json,accuracy.png,config.json,versions.json} "$out"/
  "$PY" normattn-leaderboard
done
