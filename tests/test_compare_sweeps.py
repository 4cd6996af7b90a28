"""experiments/compare_sweeps.py: the committed pair behind "the dropout rate as data keeps the
results" agrees by its rule, and a best cell moved past the seeds' spread is told apart."""
import copy
import json
import os
import subprocess
import sys

from helpers import REPO

PAIR = os.path.join(REPO, "results", "table4_mode_dropout_ab")


def compare(*workdirs):
  return subprocess.run([sys.executable, os.path.join(REPO, "experiments", "compare_sweeps.py"),
                         *workdirs], capture_output=True, text=True, check=True).stdout


def test_the_committed_pair_keeps_its_best_cells_as_its_record_says():
  out = compare(os.path.join(PAIR, "per_rate"), os.path.join(PAIR, "in_program"))
  with open(os.path.join(PAIR, "comparison.txt")) as f:
    assert out == f.read()
  assert out.splitlines()[-1] == "same_best_cells=12/12"


def test_a_best_cell_moved_past_the_spread_is_told_apart(tmp_path):
  with open(os.path.join(PAIR, "in_program", "summary.json")) as f:
    summary = json.load(f)
  moved = copy.deepcopy(summary)
  for cell in moved["cells"]:
    if cell["arch"] == "nap" and cell["params"] == {"train.dropout": 0.25}:
      cell["metrics"]["val_acc"]["mean"] -= 0.5  # every rate: the best stays at 0.027
  for name, tree in (("a", summary), ("b", moved)):
    os.makedirs(tmp_path / name)
    (tmp_path / name / "summary.json").write_text(json.dumps(tree))
  lines = compare(tmp_path / "a", tmp_path / "b").splitlines()
  assert [line for line in lines if line.endswith("same=no")] == [
      next(line for line in lines if "=0.25 split=val arch=nap" in line)]
  assert lines[-1] == "same_best_cells=11/12"
