"""Figures of pre-training and fine-tuning runs, drawn from what their workdirs hold (histories,
summaries, ``metrics.npz``), each with its provenance (``reporting.provenance``); the sweeps' are
``reporting.figures``."""
from __future__ import annotations

import os

from normattn_jax._extras import require

matplotlib = require("matplotlib", "experiments")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from normattn_jax.reporting import provenance  # noqa: E402


def pretraining_curves(rows: dict, path: str) -> None:
  """Held-out MLM and SOP accuracy during pre-training, one line per run.

  Args:
    rows: ``{label: the run's validation rows of history.jsonl}``
      (``pretrain.train.validation_rows``).
    path: the image file to write.
  """
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
  for label, validation in rows.items():
    steps = [r["step"] for r in validation]
    for ax, metric in zip(axes, ("mlm_accuracy", "sop_accuracy")):
      ax.plot(steps, [100 * r[metric] for r in validation], marker="o", label=label)
  for ax, title in zip(axes, ("held-out MLM accuracy (%)", "held-out SOP accuracy (%)")):
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.legend()
  provenance.save(fig, path, provenance.of_figure(path))


def hybrid_weights(u: np.ndarray, path: str) -> None:
  """The DNAS paper's Fig. 4: HNAS's u per layer (0 = softmax, 1 = DNAS), the head mean and
  every head.

  Args:
    u: ``[layers, heads]`` (a pre-training summary's ``hybrid_weights_per_head``).
    path: the image file to write.
  """
  layers = np.arange(1, u.shape[0] + 1)
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for head in range(u.shape[1]):
    ax.scatter(layers, u[:, head], s=10, color="0.6")
  ax.plot(layers, u.mean(axis=1), marker="o", color="C3", label="mean over heads")
  ax.axhline(0.5, color="0.8", linestyle="--", label="initial u")
  ax.set_xlabel("layer")
  ax.set_ylabel("hybrid weight u (1 = DNAS)")
  ax.set_ylim(-0.05, 1.05)
  ax.legend()
  provenance.save(fig, path, provenance.of_figure(path))


def finetuning_curves(summary: dict, metrics_path: str, path: str) -> None:
  """The main dev metric during fine-tuning: per learning rate the mean over seeds, shaded
  between the worst and the best seed (a learning rate whose every model diverged left out).

  Args:
    summary: the run's ``summary.json`` tree (``finetune.train.summarise``).
    metrics_path: its ``metrics.npz`` (curves ``[evaluations, learning rates, seeds]``).
    path: the image file to write.
  """
  main = summary["metric"]
  steps = summary["eval_steps"]
  with np.load(metrics_path) as data:
    curves, learning_rates = data[main], data["learning_rates"]
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for i, lr in enumerate(learning_rates):
    curve = curves[:, i]
    if not np.isfinite(curve).any():
      continue
    line, = ax.plot(steps, np.nanmean(curve, 1), marker="o", label=f"lr {lr:g}")
    ax.fill_between(steps, np.nanmin(curve, 1), np.nanmax(curve, 1), alpha=0.2,
                    color=line.get_color())
  ax.set_xlabel("fine-tuning step")
  ax.set_ylabel(f"dev {main}")
  ax.set_title(summary["task"], fontsize=9)
  ax.legend(fontsize=8)
  folder = os.path.dirname(path)
  config = provenance.read_json_if_any(os.path.join(folder, "config.json"))
  scale = config and (f"{summary['task']}, {config['train']['num_steps']} steps, batch "
                      f"{config['train']['batch_size']}, sequences of "
                      f"{config['task']['max_seq_length']} tokens")
  seeds = config and f"{config['num_seeds']} seeds per learning rate"
  provenance.save(fig, path, provenance.of_figure(path, scale=scale, seeds=seeds), dpi=110)
