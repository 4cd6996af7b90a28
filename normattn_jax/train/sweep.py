"""Run a whole sweep: for every static point (shape sweeps) and architecture, train the grid of
models as one compiled program, then write ``summary.json``, ``metrics.npz`` and the figures."""
from __future__ import annotations

import itertools
import json
import os
import time
from typing import Optional

import jax
import ml_collections
import numpy as np

from normattn_jax._extras import require
from normattn_jax.train import config as config_lib
from normattn_jax.train.checkpoint import GridCheckpoints, open_workdir, write_json
from normattn_jax.train.grid import Grid, Setup

ACCURACY_PREFIXES = ("train_acc", "val_acc", "case_acc", "val_case_acc")


class Interrupted(Exception):
  """Raised when ``max_chunks`` ran out: the run resumes from its checkpoints."""


def hyperparameter_grid(config: ml_collections.ConfigDict):
  """The flattened models axis: learning rate x vmapped sweep value x seed (seed innermost)."""
  lrs = [float(lr) for lr in config.learning_rates]
  vmapped = config.sweep.name in config_lib.VMAPPED_SWEEPS
  values = [float(v) for v in config.sweep["values"]] if vmapped else [None]
  rows = list(itertools.product(range(len(lrs)), range(len(values)), range(config.num_seeds)))
  hp = {"learning_rate": np.array([lrs[i] for i, _, _ in rows], np.float32),
        "l2": np.array([values[j] if vmapped and config.sweep.name == "train.l2"
                        else config.train.l2 for _, j, _ in rows], np.float32)}
  seeds = np.array([s for _, _, s in rows], np.int32)
  return hp, seeds, (len(lrs), len(values), config.num_seeds)


def model_keys(seed: int, seed_indices: np.ndarray) -> np.ndarray:
  """Seed s gets the same initialisation and data at every learning rate (paired comparisons)."""
  base = jax.random.key(seed)
  return np.stack([np.asarray(jax.random.key_data(jax.random.fold_in(base, int(s))))
                   for s in seed_indices])


def _chunk_count(config):
  return config.train.num_steps // config.train.eval_every


def to_host(x: jax.Array) -> np.ndarray:
  """The whole models axis as numpy, also when it is sharded over several hosts."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.asarray(x)


def train_point(config, arch, values, workdir, progress=None, max_chunks=None, writer=None):
  """Train the grid of one arch at one static point; returns metrics ``{name: [evals, models]}``."""
  point = config_lib.point_config(config, values)
  setup = Setup(arch, point)
  hp, seeds, _ = hyperparameter_grid(point)
  num_models, num_chunks = len(seeds), _chunk_count(point)
  name = arch + (f"[{config_lib.point_label(values)}]" if values else "")
  grid = Grid.build(setup, num_models)
  hp_dev = grid.shard(hp)
  state = grid.init(grid.shard(model_keys(point.seed, seeds)), hp_dev)
  history: dict[str, np.ndarray] = {}
  done = 0
  checkpoints = None
  if point.train.checkpoint_every:
    checkpoints = GridCheckpoints(os.path.join(workdir, "checkpoints", name))
    if checkpoints.latest() is not None:
      like = {"state": state, "metrics": _empty_history(grid, hp_dev, state, num_chunks)}
      done, restored = checkpoints.restore_newest(like)
      state = jax.device_put(restored["state"], jax.tree.map(lambda a: a.sharding, state))
      history = {k: np.asarray(v) for k, v in restored["metrics"].items()}
  if progress is not None:
    progress.update(done * point.train.eval_every * num_models)
  for index in range(done, num_chunks):
    if max_chunks is not None and max_chunks[0] <= 0:
      raise Interrupted(name)
    state, metrics = grid.chunk(state, hp_dev)
    metrics = {k: to_host(v)[:num_models] for k, v in metrics.items()}
    for key, value in metrics.items():
      history.setdefault(key, np.zeros((num_chunks, num_models), value.dtype))[index] = value
    if writer is not None:
      writer(name, hp, (index + 1) * point.train.eval_every, metrics)
    if progress is not None:
      progress.update(point.train.eval_every * num_models)
    if max_chunks is not None:
      max_chunks[0] -= 1
    last = index + 1 == num_chunks
    if checkpoints and ((index + 1) % point.train.checkpoint_every == 0 or last):
      checkpoints.save(index + 1, {"state": state, "metrics": history})
  if checkpoints:
    checkpoints.close()
  return history


def _empty_history(grid, hp_dev, state, num_chunks):
  """The metrics tree of a checkpoint, shaped but empty (the restore target)."""
  shapes = jax.eval_shape(grid.chunk, state, hp_dev)[1]
  return {k: np.zeros((num_chunks, grid.num_models), v.dtype) for k, v in shapes.items()}


def summarise(config, results) -> dict:
  """``cells``: one per arch x learning rate x swept value, with the paper's pixel values for each
  metric: its min, mean and max over seeds at every evaluation, each then at its best over
  training (lowest loss, highest accuracy; Section 5.1: "the max over the course of training")."""
  hp, seeds, (n_lr, n_vmapped, n_seeds) = hyperparameter_grid(config)
  cells = []
  for (arch, values), history in results.items():
    for i_lr, i_v in itertools.product(range(n_lr), range(n_vmapped)):
      rows = np.arange(len(seeds)).reshape(n_lr, n_vmapped, n_seeds)[i_lr, i_v]
      params = {k: float(v) for k, v in values}
      if config.sweep.name in config_lib.VMAPPED_SWEEPS:
        params[config.sweep.name] = float(config.sweep["values"][i_v])
      metrics = {key: _best_over_training(curve[:, rows], lower_is_better=key == "train_loss")
                 for key, curve in history.items() if key != "diverged"}
      cells.append({"arch": arch, "learning_rate": float(config.learning_rates[i_lr]),
                    "params": params, "metrics": metrics,
                    "diverged": int(history["diverged"][-1, rows].sum())})
  return {"cells": cells, "best": _best_per_arch(cells)}


def _best_over_training(curve, lower_is_better):
  """{min, mean, max} over the seeds of ``curve [evals, seeds]``, each at its best evaluation."""
  best = np.nanmin if lower_is_better else np.nanmax
  out = {}
  for name, over_seeds in (("min", np.min), ("mean", np.mean), ("max", np.max)):
    per_eval = over_seeds(curve, axis=1)
    out[name] = _num(best(per_eval)) if np.isfinite(per_eval).any() else None
  return out


def _num(x):
  x = float(x)
  return x if np.isfinite(x) else None


def _best_per_arch(cells):
  """Per arch (and swept value), the paper's table entries: the best mean training and the best
  mean validation accuracy over the learning rates, each with its own learning rate.
  ``learning_rate`` is the validation pick (the figures' cross), or the training one without
  validation."""
  best = {}
  for cell in cells:
    key = cell["arch"] + ("" if not cell["params"] else " " + config_lib.point_label(cell["params"]))
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


def save_metrics(path, config, results) -> None:
  """``metrics.npz``: per arch and point, curves shaped [evals, learning rates, swept, seeds]."""
  _, _, shape = hyperparameter_grid(config)
  arrays = {"learning_rates": np.asarray(config.learning_rates, np.float64),
            "eval_steps": np.arange(1, _chunk_count(config) + 1) * config.train.eval_every}
  for (arch, values), history in results.items():
    prefix = arch + (f"[{config_lib.point_label(dict(values))}]" if values else "")
    for key, curve in history.items():
      arrays[f"{prefix}/{key}"] = curve.reshape((curve.shape[0],) + shape)
  np.savez_compressed(path, **arrays)


def resummarise(workdir: str) -> dict:
  """Score a finished run again from its ``config.json`` and ``metrics.npz``, no training:
  rewrites ``summary.json`` and the figures (after a change in how results are scored)."""
  with open(os.path.join(workdir, "config.json")) as f:
    config = ml_collections.ConfigDict(json.load(f))
  for field in ("archs", "learning_rates"):
    config[field] = tuple(config[field])
  config.sweep["values"] = tuple(config.sweep["values"])
  data = np.load(os.path.join(workdir, "metrics.npz"))
  results = {}
  for values in config_lib.static_points(config):
    for arch in config.archs:
      prefix = arch + (f"[{config_lib.point_label(values)}]" if values else "")
      results[(arch, tuple(values.items()))] = {
          name[len(prefix) + 1:]: data[name].reshape(data[name].shape[0], -1)
          for name in data.files if name.startswith(prefix + "/")}
  summary = summarise(config, results)
  write_summary(workdir, config, summary)
  return summary


def write_summary(workdir, config, summary) -> None:
  """The figures, drawn from ``summary`` and the run's ``metrics.npz``, then ``summary.json``:
  written last, it marks a finished run."""
  from normattn_jax import plots  # matplotlib only when figures are drawn
  plots.draw_sweep(config, summary, os.path.join(workdir, "metrics.npz"), workdir)
  write_json(os.path.join(workdir, "summary.json"), summary, indent=2, sort_keys=True)


def best_lines(summary) -> list[str]:
  """One line per arch (and swept value): its best mean train and validation accuracy."""
  lines = []
  for arch, best in sorted(summary["best"].items()):
    val = ("n/a" if best["val_acc"] is None
           else f"{best['val_acc']:.1%} (lr {best['learning_rate']:.2e})")
    lines.append(f"{arch:>24}: best mean train {best['train_acc']:.1%} (lr "
                 f"{best['train_learning_rate']:.2e})  val {val}")
  return lines


REGULARIZERS = {"train.dropout": "with dropout", "train.l2": "with L2"}


def regularization_table(summaries) -> str:
  """The NAP paper's Tables 2-4 as markdown, from regularisation sweeps (summaries whose
  ``sweep.name`` is ``train.dropout`` or ``train.l2``): per arch, the best mean train and validation
  accuracy unregularised (a swept value of 0) and with each regulariser (its best nonzero value,
  named in brackets, where the paper gives the value's rank)."""
  table: dict = {}  # (split, row) -> arch -> (best score, the value that gave it)
  archs: set = set()
  for summary in summaries:
    for key, best in summary["best"].items():
      arch, _, point = key.partition(" ")
      name, _, value = point.partition("=")
      if name not in REGULARIZERS:
        raise ValueError(f"{key!r} is no point of a regularisation sweep {tuple(REGULARIZERS)}")
      archs.add(arch)
      row = "unregularised" if float(value) == 0 else REGULARIZERS[name]
      for split in ("train", "val"):
        score = best[f"{split}_acc"]
        cell = table.setdefault((split, row), {})
        if score is not None and (arch not in cell or score > cell[arch][0]):
          cell[arch] = (score, "" if row == "unregularised" else f" ({float(value):g})")
  order = list(config_lib.PAPER_ARCHS)  # the paper's columns first
  archs = sorted(archs, key=lambda a: (order.index(a) if a in order else len(order), a))
  lines = ["| | " + " | ".join(archs) + " |", "|---" * (len(archs) + 1) + "|"]
  for split, label in (("train", "train"), ("val", "validation")):
    for row in ("unregularised", *REGULARIZERS.values()):
      cells = table.get((split, row), {})
      if cells:
        lines.append(f"| {label}, {row} | " + " | ".join(
            f"{100 * cells[a][0]:.1f}{cells[a][1]}" if a in cells else "-" for a in archs) + " |")
  return "\n".join(lines)


def run_sweep(config: ml_collections.ConfigDict, workdir: str, *, max_chunks: Optional[int] = None,
              show_progress: bool = True, tensorboard: bool = True, afresh: bool = False) -> dict:
  """Validate, train every (point, arch) grid, write the results; returns the summary. The
  workdir resumes a run of this config, or returns a finished one's summary untouched; another
  config's is refused (``WorkdirError``) unless ``afresh`` moves it aside (``open_workdir``)."""
  config_lib.validate(config)
  finished = open_workdir(workdir, config, "sweep", afresh=afresh)
  if finished is not None:
    return finished
  chief = jax.process_index() == 0  # on several hosts, one writes the files
  points = config_lib.static_points(config)
  jobs = [(arch, values) for values in points for arch in config.archs]
  total = sum(config_lib.point_config(config, v).train.num_steps for _, v in jobs) \
      * len(hyperparameter_grid(config)[1])
  progress = _progress(total, show_progress and chief)
  writer = _Writer(workdir) if tensorboard and chief else None
  budget = None if max_chunks is None else [max_chunks]
  results = {}
  started = time.perf_counter()
  try:
    for arch, values in jobs:
      results[(arch, tuple(values.items()))] = train_point(
          config, arch, values, workdir, progress, budget, writer)
  finally:
    if progress is not None:
      progress.close()
    if writer is not None:
      writer.close()
  summary = summarise(config, results)
  if not chief:
    return summary
  save_metrics(os.path.join(workdir, "metrics.npz"), config, results)
  write_summary(workdir, config, summary)
  print(f"trained {len(jobs)} grid(s) in {time.perf_counter() - started:.0f} s; "
        f"results in {workdir}")
  return summary


def _progress(total, show):
  if not show:
    return None
  tqdm = require("tqdm", "experiments").tqdm
  return tqdm(total=total, unit="model-step", unit_scale=True, smoothing=0.1)


class _Writer:
  """TensorBoard scalars: per arch and learning rate, the mean over the other models."""

  def __init__(self, workdir):
    SummaryWriter = require("tensorboardX", "experiments").SummaryWriter
    self.summary = SummaryWriter(os.path.join(workdir, "tensorboard"))

  def __call__(self, name, hp, step, metrics):
    for lr in np.unique(hp["learning_rate"]):
      rows = hp["learning_rate"] == lr
      for key in ("train_loss", "train_acc", "val_acc"):
        self.summary.add_scalar(f"{name}/lr={lr:.3g}/{key}", float(np.mean(metrics[key][rows])),
                                step)

  def close(self):
    self.summary.close()

