"""REPORT_CARDS.md is the committed cards' table, generated from their report.json files."""
import os

import pytest

from normattn_jax.reporting import leaderboard

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_committed_table_is_the_committed_cards():
  with open(os.path.join(REPO, "REPORT_CARDS.md")) as f:
    committed = f.read()
  reports = leaderboard.read_reports(os.path.join(REPO, "results", "report_cards"))
  assert committed == leaderboard.markdown(reports)


def report(name, scale="cpu"):
  arm = lambda acc: {"train_acc": acc, "val_acc": acc, "learned_all": [True, False, True]}
  task = {"arms": {"card": arm([0.9, 0.8, 0.7]), "softmax": arm([0.5] * 3),
                   "nap": arm([0.6] * 3)},
          "tests": {"softmax": {"train_acc": 0.04, "val_acc": 0.2},
                    "nap": {"train_acc": 0.5, "val_acc": 0.5}}}
  cost = [{"mode": "fwd+bwd", "n": n, "path": path, "seconds": s, "softmax_seconds": 2.0}
          for n, path, s in ((128, "quadratic", 1.0), (4096, "quadratic", 3.0),
                             (4096, "fast", 1.0))]
  return {"normalization": name, "scale": scale, "sizes": {"seq_len": 16, "d_model": 32},
          "tasks": {"case": task, "first_token": task, "mode": task},
          "attention": {"card": {"explained_away": [0.1, 0.3], "below_bound": [0.0, 0.2],
                                 "unselectable": [0.0, 0.5]}},
          "mode_collapse": {"unbalanced": {"card": [2, 2, 1]}}, "cost": cost}


def test_a_row_reads_each_diagnostic_from_its_card():
  assert leaderboard.row(report("sink")) == [
      "`sink`", "80.0* (50.0 / 60.0)", "2/3", "2/3", "80.0 (50.0 / 60.0)", "20.0", "1/2", "1",
      "25.0", "1.50 / 0.50 (N = 4096)"]
  text = leaderboard.markdown([report("sink"), report("dnas")])
  assert text.count("\n| `") == 2 and "## The columns" in text and "## How sure" in text
  with pytest.raises(ValueError, match="several scales"):
    leaderboard.markdown([report("sink"), report("dnas", "smoke")])
