"""Scores of a sweep as the NAP paper reports them: per cell (arch x learning rate x swept value)
the min, mean and max over seeds, each at its best over training, and per arch the best mean over
the learning rates."""
from __future__ import annotations

import numpy as np

from normattn_jax.sweep import config as config_lib
from normattn_jax.sweep.plan import SweepPlan

LOWER_IS_BETTER = ("train_loss",)  # the metrics whose best over training is the lowest


def summarise(plan: SweepPlan, results) -> dict:
  """The ``summary.json`` of a sweep.

  ``cells`` holds one entry per arch x learning rate x swept value with the paper's pixel values
  for each metric: its min, mean and max over seeds at every evaluation, each then at its best
  over training (lowest loss, highest accuracy; Section 5.1: "the max over the course of
  training"). ``best`` holds the paper's table entries (``_best_per_arch``).

  Args:
    plan: the sweep's plan.
    results: ``{grid key (arch, static point items): {metric: [evals, models]}}``, models in
      the order of ``plan.axis``.

  Returns:
    ``{"cells": [...], "best": {...}}``.
  """
  axis = plan.axis
  cells = []
  for (arch, point), history in results.items():
    for lr_index, value_index in axis.cells():
      rows = axis.rows(lr_index, value_index)
      params = {k: float(v) for k, v in point}
      params.update(axis.swept_params(value_index))
      diverged = np.asarray(history["diverged"][-1, rows], bool)
      metrics = {key: best_over_training(
                     failed_where_diverged(curve[:, rows], diverged, key in LOWER_IS_BETTER),
                     lower_is_better=key in LOWER_IS_BETTER)
                 for key, curve in history.items() if key != "diverged"}
      cells.append({"arch": arch, "learning_rate": axis.learning_rates[lr_index],
                    "params": params, "metrics": metrics, "diverged": int(diverged.sum())})
  return {"cells": cells, "best": _best_per_arch(cells, axis.num_seeds)}


def failed_where_diverged(curve, diverged, lower_is_better=False):
  """``curve [evals, seeds]`` with every seed that diverged by the end failed at every
  evaluation: accuracy 0, loss NaN (no score). A score it reached before its parameters blew up
  (or on the NaN logits of the evaluation they blew up at) is no evidence it trained.

  Args:
    curve: one metric's ``[evals, seeds]``.
    diverged: bool ``[seeds]``, the final ``TrainState.diverged`` of each seed.
    lower_is_better: a loss (failed is NaN) rather than an accuracy (failed is 0).

  Returns:
    A copy of ``curve``, of its dtype (so that the scores round as the stored ones did).
  """
  failed = np.nan if lower_is_better else 0.0
  return np.where(np.asarray(diverged, bool)[None, :], failed, np.asarray(curve))


def best_over_training(curve, lower_is_better):
  """{min, mean, max} over the seeds of ``curve [evals, seeds]``, each at its best evaluation."""
  best = np.nanmin if lower_is_better else np.nanmax
  out = {}
  for name, over_seeds in (("min", np.min), ("mean", np.mean), ("max", np.max)):
    per_eval = over_seeds(curve, axis=1)
    out[name] = _num(best(per_eval)) if np.isfinite(per_eval).any() else None
  return out


def _num(x):
  """A finite float, or None (JSON has no NaN)."""
  x = float(x)
  return x if np.isfinite(x) else None


def _best_per_arch(cells, num_seeds: int):
  """Per arch (and swept value), the paper's table entries: the best mean training and the best
  mean validation accuracy over the learning rates, each with its own learning rate (one whose
  every model diverged aside). ``learning_rate`` is the validation pick (the figures' cross), or
  the training one without validation; None where every learning rate diverged."""
  best = {}
  for cell in cells:
    label = config_lib.point_label(cell["params"])
    key = cell["arch"] + (" " + label if label else "")
    entry = best.setdefault(key, {"train_acc": -1.0, "val_acc": -1.0})
    if cell["diverged"] == num_seeds:  # a learning rate that failed throughout is no pick
      continue
    for split in ("train", "val"):
      score = cell["metrics"].get(f"{split}_acc", {}).get("mean")
      if score is not None and score > entry[f"{split}_acc"]:
        entry[f"{split}_acc"], entry[f"{split}_learning_rate"] = score, cell["learning_rate"]
  for entry in best.values():
    for split in ("train", "val"):
      if entry[f"{split}_acc"] < 0:
        entry[f"{split}_acc"] = None
    entry["learning_rate"] = entry.get("val_learning_rate", entry.get("train_learning_rate"))
  return best


def best_lines(summary) -> list[str]:
  """One line per arch (and swept value): its best mean train and validation accuracy.

  Args:
    summary: a ``summarise`` result (or a ``summary.json`` read back).

  Returns:
    The lines, sorted by arch, for a terminal.
  """
  lines = []
  for arch, best in sorted(summary["best"].items()):
    train = ("n/a (every learning rate diverged)" if best["train_acc"] is None
             else f"{best['train_acc']:.1%} (lr {best['train_learning_rate']:.2e})")
    val = ("n/a" if best["val_acc"] is None
           else f"{best['val_acc']:.1%} (lr {best['learning_rate']:.2e})")
    lines.append(f"{arch:>24}: best mean train {train}  val {val}")
  return lines
