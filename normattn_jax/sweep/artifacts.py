"""The files of a sweep's workdir that hold its results: ``metrics.npz`` (every curve, unflattened
to learning rate x swept value x seed), ``summary.json`` (written last: it marks a finished run)
and the ``config.json`` they are read back with."""
from __future__ import annotations

import os
import zipfile

import ml_collections
import numpy as np

from normattn_jax.train.checkpoint import read_json, write_json
from normattn_jax.train.migrate import with_current_names
from normattn_jax.sweep.plan import SweepPlan

METRICS = "metrics.npz"
SUMMARY = "summary.json"
# Fields that config.json stores as lists and a config holds as tuples.
TUPLE_FIELDS = ("archs", "learning_rates", "sweep.grid")


def eval_steps(config) -> np.ndarray:
  """The training step of each evaluation: ``eval_every, 2 eval_every, ..., num_steps``."""
  every = config.train.eval_every
  return every * np.arange(1, config.train.num_steps // every + 1)


def save_metrics(path: str, plan: SweepPlan, results) -> None:
  """Write ``metrics.npz``: per grid (arch and static point) and metric, the curves shaped
  ``[evals, learning rates, swept values, seeds]``, with ``learning_rates`` and ``eval_steps``
  (those of the sweep's config; a static point whose steps scale, ``sweep.steps_scale``,
  evaluates at ``eval_steps(plan.point_config(point))``, as many).

  Args:
    path: the file to write.
    plan: the sweep's plan.
    results: ``{grid key (arch, static point items): {metric: [evals, models]}}``.
  """
  arrays = {"learning_rates": np.asarray(plan.config.learning_rates, np.float64),
            "eval_steps": eval_steps(plan.config)}
  for grid_key, history in results.items():
    name = plan.grid(*grid_key).name
    for key, curve in history.items():
      arrays[f"{name}/{key}"] = plan.axis.unflatten(curve)
  partial = path + ".partial"  # whole or not at all: a failed write leaves the old file (or none)
  with open(partial, "wb") as f:
    np.savez_compressed(f, **arrays)
  os.replace(partial, path)


def replace_arch(path: str, plan: SweepPlan, arch: str, results) -> None:
  """Replace one arch's curves in a ``metrics.npz`` (e.g. after training that arch again), every
  other array kept as it is and in its place.

  Args:
    path: the ``metrics.npz`` to rewrite (whole or not at all).
    plan: the plan of the sweep it was saved with (of ``read_config``).
    arch: one of ``plan.archs``.
    results: ``{grid key (arch, static point items): {metric: [evals, models]}}`` with a grid of
      ``arch`` at every static point of the sweep (as ``read_results`` of a sweep of that arch
      returns); grids of other archs in it are ignored.

  Raises:
    ValueError: if ``arch`` is not one of ``plan.archs``, ``results`` lacks one of its grids,
      or a new curve's shape differs from the stored one's.
  """
  new = {}  # grid prefix -> {key: array}
  for grid in plan.grids_of(arch):
    history = results.get(grid.key)
    if history is None:
      raise ValueError(f"no curves of grid {grid.name!r} to replace")
    prefix = grid.name + "/"
    new[prefix] = {prefix + key: plan.axis.unflatten(np.asarray(curve))
                   for key, curve in history.items()}
  arrays, written = {}, set()
  with np.load(path) as data:
    for name in data.files:
      prefix = next((p for p in new if name.startswith(p)), None)
      if prefix is None:
        arrays[name] = data[name]
        continue
      stored = new[prefix].get(name)
      if stored is not None and stored.shape != data[name].shape:
        raise ValueError(f"{path}: {name} has shape {data[name].shape}, its replacement "
                         f"{stored.shape}")
      if prefix not in written:
        arrays.update(new[prefix])
        written.add(prefix)
  for prefix in new.keys() - written:  # a grid the file lacked
    arrays.update(new[prefix])
  partial = path + ".partial"
  with open(partial, "wb") as f:
    np.savez_compressed(f, **arrays)
  os.replace(partial, path)


def read_config(workdir: str) -> ml_collections.ConfigDict:
  """A sweep's ``config.json`` as a config in today's form (``migrate.with_current_names``: a
  run stored before ``sweep.values`` became ``sweep.grid`` reads as one stored after).

  Args:
    workdir: a sweep's workdir.

  Returns:
    The config the run trained with.

  Raises:
    ValueError: naming the file, if it is not JSON or not a sweep's config.
  """
  path = os.path.join(workdir, "config.json")
  tree = with_current_names(read_json(path), "sweep")
  for field in TUPLE_FIELDS:  # before the ConfigDict exists, which would keep them lists
    section, _, key = field.rpartition(".")
    node = tree.get(section) if section else tree
    if not isinstance(node, dict) or not isinstance(node.get(key), list):
      raise ValueError(f"{path} is not a sweep's config: it has no list {field}")
    node[key] = tuple(node[key])
  return ml_collections.ConfigDict(tree)


def _open_npz(path: str):
  """``np.load(path)`` of an ``.npz``; one that is not (a write cut short) is named."""
  try:
    return np.load(path)
  except (ValueError, zipfile.BadZipFile) as err:
    raise ValueError(f"{path} is not a readable .npz ({err})") from None


def read_results(workdir: str, plan: SweepPlan) -> dict:
  """The curves of ``metrics.npz`` as training returned them.

  Args:
    workdir: a finished sweep's workdir.
    plan: its plan (of ``read_config``).

  Returns:
    ``{grid key (arch, static point items): {metric: [evals, models]}}``, in ``plan.grids``'
    order, as ``save_metrics`` took it.
  """
  results = {}
  with _open_npz(os.path.join(workdir, METRICS)) as data:
    for grid in plan.grids:
      prefix = grid.name + "/"
      curves = {name[len(prefix):]: plan.axis.flatten(data[name])
                for name in data.files if name.startswith(prefix)}
      if not curves:
        raise ValueError(f"{os.path.join(workdir, METRICS)} holds no curves of grid "
                         f"{grid.name!r}, which its config.json trains")
      results[grid.key] = curves
  return results


def write_summary(workdir: str, summary: dict) -> None:
  """Write ``summary.json``, whole or not at all; call it last, as it marks a finished run."""
  write_json(os.path.join(workdir, SUMMARY), summary, indent=2, sort_keys=True)
