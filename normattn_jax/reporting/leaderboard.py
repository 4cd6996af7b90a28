"""The report cards side by side: one row per normalisation, one column per diagnostic
(``REPORT_CARDS.md``), generated from the cards' ``report.json`` files and nothing else, so
that the table and the committed cards cannot disagree (a test regenerates it).
"""
from __future__ import annotations

import glob
import json
import os

import numpy as np

from normattn_jax.reporting.report_card import CASES

COLUMNS = (
    ("normalisation", "the card's normalisation and options"),
    ("case: train %", "case task, training accuracy at the best learning rate, mean over seeds "
                      "(softmax's / NAP's beside; * = the card differs from softmax at p < "
                      "0.05, two-sided Mann-Whitney over the seeds)"),
    ("case: all 3", "seeds that learn all three cases (argmin, first, argmax) above the card's "
                    "stated threshold"),
    ("first token: all 3", "the NAP paper's Fig. 5 criterion: seeds that learn all three cases "
                           "of the first-token task"),
    ("mode 2N: val %", "mode task at S = 2N, validation accuracy (* as above)"),
    ("explained away %", "share of keys whose total attention over the queries is below 1e-8 "
                         "in the trained case-task models (DNAS paper)"),
    ("Thm 2 bound", "seeds in which every key keeps a total weight >= 1/N (guaranteed by DNAS "
                    "only)"),
    ("clusters", "clusters left of the unbalanced two-cluster toy after 4 updates, at initial "
                 "parameters (softmax collapses to 1, DNAS keeps 2)"),
    ("unselectable %", "share of keys that no query direction can select (LayerNorm paper)"),
    ("time vs softmax", "forward + backward at the longest N measured, quadratic / fast path "
                        "over softmax's quadratic path"),
)


def read_reports(folder: str) -> list[dict]:
  """Every ``<folder>/<name>/report.json``, by name.

  Args:
    folder: e.g. ``results/report_cards``.

  Returns:
    The reports, sorted by normalisation.
  """
  reports = []
  for path in sorted(glob.glob(os.path.join(folder, "*", "report.json"))):
    with open(path) as f:
      reports.append(json.load(f))
  return reports


def _mean(values) -> float:
  return 100 * float(np.mean(values))


def _accuracy(task: dict, metric: str) -> str:
  arms = task["arms"]
  star = "*" if task["tests"]["softmax"][metric] < 0.05 else ""
  return (f"{_mean(arms['card'][metric]):.1f}{star} ({_mean(arms['softmax'][metric]):.1f} / "
          f"{_mean(arms['nap'][metric]):.1f})")


def _learned(task: dict) -> str:
  card = task["arms"]["card"]["learned_all"]
  return f"{sum(card)}/{len(card)}"


def _time(report: dict) -> str:
  rows = [r for r in report["cost"] if r["mode"] == "fwd+bwd"]
  longest = max(r["n"] for r in rows)
  ratio = {r["path"]: r["seconds"] / r["softmax_seconds"] for r in rows
           if r["n"] == longest and r["seconds"] and r["softmax_seconds"]}
  shown = " / ".join(f"{ratio[p]:.2f}" if p in ratio else "-" for p in ("quadratic", "fast"))
  return f"{shown} (N = {longest})"


def row(report: dict) -> list[str]:
  """One normalisation's cells, in ``COLUMNS``' order."""
  tasks, attention = report["tasks"], report["attention"]["card"]
  bound = attention["below_bound"]
  return [f"`{report['normalization']}`",
          _accuracy(tasks["case"], "train_acc"), _learned(tasks["case"]),
          _learned(tasks["first_token"]), _accuracy(tasks["mode"], "val_acc"),
          f"{_mean(attention['explained_away']):.1f}",
          f"{sum(x == 0 for x in bound)}/{len(bound)}",
          str(report["mode_collapse"]["unbalanced"]["card"][-1]),
          f"{_mean(attention['unselectable']):.1f}", _time(report)]


def markdown(reports: list[dict]) -> str:
  """``REPORT_CARDS.md``: the table, what each column means and how sure it is.

  Args:
    reports: the cards (``read_reports``), all of one scale.

  Returns:
    The document.

  Raises:
    ValueError: if the cards are of several scales.
  """
  scales = sorted({r["scale"] for r in reports})
  if len(scales) > 1:
    raise ValueError(f"the cards are of several scales {scales}; one table per scale")
  lines = ["# Report cards", "",
           "Every registered normalisation put through the four papers' diagnostics by "
           "`experiments/report_card.py`; this table is generated from "
           "`results/report_cards/*/report.json` by `experiments/leaderboard.py` "
           "(a test checks that it matches them). Each card's "
           "`report.md` has the seeds, the p-values and a verdict line per diagnostic.", ""]
  if not reports:
    return "\n".join(lines + ["No card has been committed yet.", ""])
  first = reports[0]
  sizes = first["sizes"]
  lines += [f"Scale: `{scales[0]}` (N = {sizes['seq_len']}, d = {sizes['d_model']}, "
            f"{len(first['tasks']['case']['arms']['card']['train_acc'])} seeds, the card's "
            f"normalisation in the MTE layout beside softmax (MTE) and NAP baselines trained "
            f"once per machine and shared by the cards run there; each row shows the "
            f"baselines its card was compared with: a training of them on another CPU differs "
            f"by float rounding that training amplifies, of the size of the seeds' spread).", ""]
  lines += ["| " + " | ".join(name for name, _ in COLUMNS) + " |",
            "|" + "---|" * len(COLUMNS)]
  lines += ["| " + " | ".join(row(r)) + " |" for r in reports]
  lines += ["", "## The columns", ""]
  lines += [f"- **{name}**: {meaning}." for name, meaning in COLUMNS]
  lines += ["", "## How sure", "",
            f"Each accuracy is the best over training of one seed, at the learning rate with the "
            f"best mean, over {len(first['tasks']['case']['arms']['card']['train_acc'])} seeds; "
            f"the smallest two-sided Mann-Whitney p that so few seeds can give bounds what a * "
            f"can mean. \"Learns a case\" is a threshold on that case's accuracy, stated in each "
            f"card with the cases {', '.join(CASES)}. The attention diagnostics are measured on "
            f"the trained case-task models of every seed (the mean is shown); the mode-collapse "
            f"toy is deterministic; the times are medians of a few repeats on a shared machine, "
            f"ratios to softmax measured in the same run. At this scale the table ranks the "
            f"normalisations on small models; it does not say how they compare at the papers' "
            f"sizes.", ""]
  return "\n".join(lines)
