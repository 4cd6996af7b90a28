"""Scores of a sweep as the NAP paper reports them: per cell (arch x learning rate x swept value)
the min, mean and max over seeds, each at its best over training, and per arch the best mean over
the learning rates."""
from __future__ import annotations

import numpy as np

from normattn_jax.train import config as config_lib
from normattn_jax.train.layout import ModelsAxis


def summarise(config, results) -> dict:
  """The ``summary.json`` of a sweep.

  ``cells`` holds one entry per arch x learning rate x swept value with the paper's pixel values
  for each metric: its min, mean and max over seeds at every evaluation, each then at its best
  over training (lowest loss, highest accuracy; Section 5.1: "the max over the course of
  training"). ``best`` holds the paper's table entries (``_best_per_arch``).

  Args:
    config: the sweep config.
    results: ``{(arch, static point items): {metric: [evals, models]}}``, models in the order of
      ``ModelsAxis.of(config)``.

  Returns:
    ``{"cells": [...], "best": {...}}``.
  """
  axis = ModelsAxis.of(config)
  cells = []
  for (arch, point), history in results.items():
    for lr_index, value_index in axis.cells():
      rows = axis.rows(lr_index, value_index)
      params = {k: float(v) for k, v in point}
      params.update(axis.swept_params(value_index))
      metrics = {key: best_over_training(curve[:, rows], lower_is_better=key == "train_loss")
                 for key, curve in history.items() if key != "diverged"}
      cells.append({"arch": arch, "learning_rate": axis.learning_rates[lr_index],
                    "params": params, "metrics": metrics,
                    "diverged": int(history["diverged"][-1, rows].sum())})
  return {"cells": cells, "best": _best_per_arch(cells)}


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


def _best_per_arch(cells):
  """Per arch (and swept value), the paper's table entries: the best mean training and the best
  mean validation accuracy over the learning rates, each with its own learning rate.
  ``learning_rate`` is the validation pick (the figures' cross), or the training one without
  validation."""
  best = {}
  for cell in cells:
    label = config_lib.point_label(cell["params"])
    key = cell["arch"] + (" " + label if label else "")
    entry = best.setdefault(key, {"train_acc": -1.0, "val_acc": -1.0})
    for split in ("train", "val"):
      score = cell["metrics"].get(f"{split}_acc", {}).get("mean")
      if score is not None and score > entry[f"{split}_acc"]:
        entry[f"{split}_acc"], entry[f"{split}_learning_rate"] = score, cell["learning_rate"]
  for entry in best.values():
    if entry["val_acc"] < 0:
      entry["val_acc"] = None
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
    val = ("n/a" if best["val_acc"] is None
           else f"{best['val_acc']:.1%} (lr {best['learning_rate']:.2e})")
    lines.append(f"{arch:>24}: best mean train {best['train_acc']:.1%} (lr "
                 f"{best['train_learning_rate']:.2e})  val {val}")
  return lines
