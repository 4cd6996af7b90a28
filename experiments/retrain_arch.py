"""Train one arch of finished sweeps again: python experiments/retrain_arch.py --arch=bert
results/<run> ...

Each arch of a sweep trains as its own grids, with model keys that do not depend on the arch, so
training one arch again with today's code gives the numbers a whole rerun would give it. The arch
trains at every static point, with the run's own config.json (its archs narrowed to the one arch,
train.models_per_vmap at today's default, a field the stored config lacks at its default), in the
sub-workdir <run>/retrain_<arch>: a sweep workdir of its own, so a killed run resumes when
restarted with the same command. Then the arch's curves in <run>/metrics.npz are replaced, the run
is scored again (summary.json) and its figures redrawn; <run>/retrained.json records which arch
was trained again, when, and where its config.json and versions.json lie. The sub-workdir's
checkpoints are deleted after the merge.
"""
from __future__ import annotations

import datetime
import json
import os
import shutil

import ml_collections
from absl import app, flags, logging

from normattn_jax.train import artifacts
from normattn_jax.train.checkpoint import write_json
from normattn_jax.train.config import base_config, static_points
from normattn_jax.train.layout import grid_name
from normattn_jax.train.scoring import best_lines
from normattn_jax.train.sweep import resummarise, run_sweep

RECORD = "retrained.json"

_ARCH = flags.DEFINE_string("arch", None, "The arch to train again, one of each run's archs.")
flags.mark_flag_as_required("arch")


def sub_workdir(workdir: str, arch: str) -> str:
  """The folder an arch of ``workdir`` trains again in: ``<workdir>/retrain_<arch>``."""
  return os.path.join(workdir, f"retrain_{arch}")


def _merged(defaults: dict, stored: dict) -> dict:
  """``defaults`` with every field of ``stored`` set over it, section by section."""
  out = dict(defaults)
  for key, value in stored.items():
    if isinstance(value, dict) and isinstance(out.get(key), dict):
      value = _merged(out[key], value)
    out[key] = value
  return out


def retrain_config(config: ml_collections.ConfigDict, arch: str) -> ml_collections.ConfigDict:
  """The config that trains ``arch`` of a stored run again.

  Args:
    config: the run's config (``artifacts.read_config``).
    arch: one of ``config.archs``.

  Returns:
    ``config`` with ``archs`` narrowed to ``(arch,)``, ``train.models_per_vmap`` at today's
    default and each field it lacks at today's default.

  Raises:
    ValueError: if ``arch`` is not one of ``config.archs``.
  """
  if arch not in config.archs:
    raise ValueError(f"arch {arch!r} is not one of the run's archs {tuple(config.archs)}")
  defaults = base_config()
  c = ml_collections.ConfigDict(_merged(defaults.to_dict(), config.to_dict()))
  c.archs = (arch,)
  c.train.models_per_vmap = defaults.train.models_per_vmap
  return c


def _utc(seconds: float) -> str:
  return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
      "%Y-%m-%dT%H:%M:%SZ")


def record(workdir: str, config, arch: str) -> dict:
  """Add (or update) ``arch``'s entry in ``<workdir>/retrained.json``.

  Args:
    workdir: the run.
    config: its config.
    arch: the arch trained again in ``sub_workdir(workdir, arch)``.

  Returns:
    The whole record, arch -> entry.
  """
  path = os.path.join(workdir, RECORD)
  try:
    with open(path) as f:
      tree = json.load(f)
  except (OSError, ValueError):
    tree = {}
  sub = os.path.basename(sub_workdir(workdir, arch))
  finished = os.path.getmtime(os.path.join(workdir, sub, artifacts.SUMMARY))
  tree[arch] = {
      "workdir": sub, "finished": _utc(finished),
      "config": f"{sub}/config.json", "versions": f"{sub}/versions.json",
      "grids": [grid_name(arch, point) for point in static_points(config)],
      "replaced": f"the curves of these grids in {artifacts.METRICS}; {artifacts.SUMMARY} and "
                  "the figures scored and drawn again"}
  write_json(path, tree, indent=2, sort_keys=True)
  return tree


def retrain_arch(workdir: str, arch: str, *, show_progress: bool = True,
                 tensorboard: bool = False) -> dict:
  """Train ``arch`` of a finished sweep again (resuming a killed attempt), put its curves in the
  run's ``metrics.npz``, score the run again and record it; then delete the sub-workdir's
  checkpoints. Run again after it finished, it trains nothing and merges the same curves.

  Args:
    workdir: a finished sweep's workdir (``config.json``, ``metrics.npz``, ``summary.json``).
    arch: one of its archs.
    show_progress: show the sub-sweep's progress bar.
    tensorboard: write the sub-sweep's TensorBoard scalars besides its history.jsonl.

  Returns:
    The run's new summary (``scoring.summarise``).

  Raises:
    FileNotFoundError: if ``workdir`` holds no finished sweep.
    ValueError: if ``arch`` is not one of its archs.
  """
  for name in ("config.json", artifacts.METRICS, artifacts.SUMMARY):
    if not os.path.exists(os.path.join(workdir, name)):
      raise FileNotFoundError(f"{workdir} holds no finished sweep: it lacks {name}")
  config = artifacts.read_config(workdir)
  sub_config = retrain_config(config, arch)
  sub = sub_workdir(workdir, arch)
  run_sweep(sub_config, sub, show_progress=show_progress, tensorboard=tensorboard)
  artifacts.replace_arch(os.path.join(workdir, artifacts.METRICS), config, arch,
                         artifacts.read_results(sub, sub_config))
  record(workdir, config, arch)
  summary = resummarise(workdir)
  shutil.rmtree(os.path.join(sub, "checkpoints"), ignore_errors=True)
  return summary


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError("give the workdir of at least one finished sweep")
  logging.set_verbosity(logging.ERROR)  # keep checkpoint chatter out of the progress bar
  for workdir in workdirs:
    print(workdir)
    print("\n".join(best_lines(retrain_arch(workdir, _ARCH.value))))


if __name__ == "__main__":
  app.run(main)
