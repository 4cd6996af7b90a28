"""The files of a sweep's workdir that hold its results: ``metrics.npz`` (every curve, unflattened
to learning rate x swept value x seed), ``summary.json`` (written last: it marks a finished run)
and the ``config.json`` they are read back with."""
from __future__ import annotations

import os
import zipfile

import ml_collections
import numpy as np

from normattn_jax.train import config as config_lib
from normattn_jax.train.checkpoint import read_json, write_json
from normattn_jax.train.migrate import with_current_names
from normattn_jax.train.layout import ModelsAxis, grid_name

METRICS = "metrics.npz"
SUMMARY = "summary.json"
# Fields that config.json stores as lists and a config holds as tuples.
TUPLE_FIELDS = ("archs", "learning_rates", "sweep.grid")


def eval_steps(config) -> np.ndarray:
  """The training step of each evaluation: ``eval_every, 2 eval_every, ..., num_steps``."""
  every = config.train.eval_every
  return every * np.arange(1, config.train.num_steps // every + 1)


def save_metrics(path: str, config, results) -> None:
  """Write ``metrics.npz``: per grid (arch and static point) and metric, the curves shaped
  ``[evals, learning rates, swept values, seeds]``, with ``learning_rates`` and ``eval_steps``
  (those of ``config``; a static point whose steps scale, ``sweep.steps_scale``, evaluates at
  ``eval_steps(point_config(config, point))``, as many).

  Args:
    path: the file to write.
    config: the sweep config.
    results: ``{(arch, static point items): {metric: [evals, models]}}``.
  """
  axis = ModelsAxis.of(config)
  arrays = {"learning_rates": np.asarray(config.learning_rates, np.float64),
            "eval_steps": eval_steps(config)}
  for (arch, point), history in results.items():
    for key, curve in history.items():
      arrays[f"{grid_name(arch, dict(point))}/{key}"] = axis.unflatten(curve)
  np.savez_compressed(path, **arrays)


def replace_arch(path: str, config, arch: str, results) -> None:
  """Replace one arch's curves in a ``metrics.npz`` (e.g. after training that arch again), every
  other array kept as it is and in its place.

  Args:
    path: the ``metrics.npz`` to rewrite (whole or not at all).
    config: the sweep config it was saved with (``read_config``).
    arch: one of ``config.archs``.
    results: ``{(arch, static point items): {metric: [evals, models]}}`` with a grid of ``arch``
      at every static point of ``config`` (as ``read_results`` of a sweep of that arch returns);
      grids of other archs in it are ignored.

  Raises:
    ValueError: if ``arch`` is not one of ``config.archs``, ``results`` lacks one of its grids,
      or a new curve's shape differs from the stored one's.
  """
  if arch not in config.archs:
    raise ValueError(f"arch {arch!r} is not one of the run's archs {tuple(config.archs)}")
  axis = ModelsAxis.of(config)
  new = {}  # grid prefix -> {key: array}
  for point in config_lib.static_points(config):
    history = results.get((arch, tuple(point.items())))
    if history is None:
      raise ValueError(f"no curves of grid {grid_name(arch, point)!r} to replace")
    prefix = grid_name(arch, point) + "/"
    new[prefix] = {prefix + key: axis.unflatten(np.asarray(curve))
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


def read_results(workdir: str, config) -> dict:
  """The curves of ``metrics.npz`` as training returned them.

  Args:
    workdir: a finished sweep's workdir.
    config: its config (``read_config``).

  Returns:
    ``{(arch, static point items): {metric: [evals, models]}}``, as ``save_metrics`` took it.
  """
  axis = ModelsAxis.of(config)
  results = {}
  with _open_npz(os.path.join(workdir, METRICS)) as data:
    for point in config_lib.static_points(config):
      for arch in config.archs:
        prefix = grid_name(arch, point) + "/"
        curves = {name[len(prefix):]: axis.flatten(data[name])
                  for name in data.files if name.startswith(prefix)}
        if not curves:
          raise ValueError(f"{os.path.join(workdir, METRICS)} holds no curves of grid "
                           f"{prefix[:-1]!r}, which its config.json trains")
        results[(arch, tuple(point.items()))] = curves
  return results


def write_summary(workdir: str, summary: dict) -> None:
  """Write ``summary.json``, whole or not at all; call it last, as it marks a finished run."""
  write_json(os.path.join(workdir, SUMMARY), summary, indent=2, sort_keys=True)
