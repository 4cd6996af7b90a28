"""Run a whole sweep: for every static point (shape sweeps) and architecture, train the grid of
models as one compiled program, resuming from checkpoints, then score it (``scoring``) and write
``metrics.npz``, the figures and ``summary.json`` (``artifacts``, ``normattn_jax.reporting``)."""
from __future__ import annotations

import os
import time
from typing import Optional

import jax
import ml_collections
import numpy as np

from normattn_jax._extras import require
from normattn_jax.train import artifacts
from normattn_jax.train import config as config_lib
from normattn_jax.train.checkpoint import GridCheckpoints, open_workdir
from normattn_jax.train.grid import Grid, Setup
from normattn_jax.train.layout import ModelsAxis, grid_name
from normattn_jax.train.scoring import summarise


class Interrupted(Exception):
  """Raised when ``max_chunks`` ran out: the run resumes from its checkpoints."""


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
  axis = ModelsAxis.of(point)
  hp, seeds = axis.hyperparameters(), axis.seed_indices()
  num_models, num_chunks = axis.num_models, _chunk_count(point)
  name = grid_name(arch, values)
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
      writer(name, axis, (index + 1) * point.train.eval_every, metrics)
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


def resummarise(workdir: str) -> dict:
  """Score a finished run again from its ``config.json`` and ``metrics.npz``, no training:
  rewrites ``summary.json`` and the figures (after a change in how results are scored).

  Args:
    workdir: a finished sweep's workdir; one stored under the field name ``sweep.values`` reads
      as ``sweep.grid``.

  Returns:
    The new summary.
  """
  config = artifacts.read_config(workdir)
  summary = summarise(config, artifacts.read_results(workdir, config))
  write_results(workdir, config, summary)
  return summary


def write_results(workdir, config, summary) -> None:
  """The figures, drawn from ``summary`` and the run's ``metrics.npz``, then ``summary.json``:
  written last, it marks a finished run."""
  from normattn_jax.reporting import figures  # matplotlib only when figures are drawn
  figures.draw_sweep(config, summary, os.path.join(workdir, artifacts.METRICS), workdir)
  artifacts.write_summary(workdir, summary)


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
      * ModelsAxis.of(config).num_models
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
  artifacts.save_metrics(os.path.join(workdir, artifacts.METRICS), config, results)
  write_results(workdir, config, summary)
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

  def __call__(self, name, axis, step, metrics):
    for index, lr in enumerate(axis.learning_rates):
      rows = axis.lr_indices() == index
      for key in ("train_loss", "train_acc", "val_acc"):
        self.summary.add_scalar(f"{name}/lr={lr:.3g}/{key}", float(np.mean(metrics[key][rows])),
                                step)

  def close(self):
    self.summary.close()

