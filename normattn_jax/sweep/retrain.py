"""One arch of a finished sweep trained again and merged back (``normattn-retrain``).

Each arch of a sweep trains as its own grids, with model keys that do not depend on the arch, so
training one arch again with today's code gives the numbers a whole rerun would give it, on the
devices the run was made on (their number, and a CPU's cores, change the numbers to float
rounding). The arch trains at every static point, with the run's own config.json (its archs
narrowed to the one arch, train.models_per_vmap at today's default, a field the stored config lacks
at its default), in the sub-workdir <run>/retrain_<arch>: a sweep workdir of its own, so a killed
run resumes when restarted with the same command. Then the arch's curves in <run>/metrics.npz are
replaced and the run is scored again (summary.json; the caller draws the figures again);
<run>/retrained.json records which arch was trained again, when, and where its config.json and
versions.json lie. The sub-workdir's checkpoints are deleted after the merge.

A run is refused before anything trains when this process cannot train it as it was trained: on
another backend or number of devices (on a CPU, of cores) than its versions.json records, or with a
normalisation or task that is not registered here (a plugin's, whose module was not loaded).
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
from typing import Optional, Sequence

import jax
import ml_collections

from normattn_jax import tasks
from normattn_jax._extras import cpu_cores
from normattn_jax.attention import registry as attention_registry
from normattn_jax.sweep import artifacts
from normattn_jax.train.checkpoint import WorkdirError, write_json
from normattn_jax.sweep.config import base_config
from normattn_jax.sweep.plan import SweepPlan
from normattn_jax.sweep.train import resummarise, run_sweep

RECORD = "retrained.json"
VERSIONS = "versions.json"


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


def recorded_devices(workdir: str) -> Optional[dict]:
  """``{"backend", "device_count"}`` a run started on, from its ``versions.json``, and on a CPU
  its ``cpu_cores`` where recorded; None for a run stored before runs recorded them (and before
  ``--cpu_devices``: it ran on JAX's default devices, as a retrain does unless told otherwise).

  Raises:
    WorkdirError: if ``versions.json`` does not read as a record.
  """
  path = os.path.join(workdir, VERSIONS)
  try:
    with open(path) as f:
      stored = json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, ValueError) as err:
    raise WorkdirError(f"workdir {workdir}: cannot read its {VERSIONS} ({err})") from None
  if not isinstance(stored, dict) or not {"backend", "device_count"} <= stored.keys():
    raise WorkdirError(f"workdir {workdir}: its {VERSIONS} records no backend and device_count")
  devices = {"backend": stored["backend"], "device_count": stored["device_count"]}
  if stored["backend"] == "cpu" and "cpu_cores" in stored:
    devices["cpu_cores"] = stored["cpu_cores"]
  return devices


def devices_here() -> dict:
  """``{"backend", "device_count"}`` of this process, and on a CPU its ``cpu_cores``, as
  ``recorded_devices`` reads a run's."""
  devices = {"backend": jax.default_backend(), "device_count": jax.device_count()}
  if devices["backend"] == "cpu":
    devices["cpu_cores"] = cpu_cores()
  return devices


def _devices(devices: dict) -> str:
  named = f"{devices['device_count']} {devices['backend']} device(s)"
  return f"{named} on {devices['cpu_cores']} core(s)" if "cpu_cores" in devices else named


def check_devices(workdir: str, here: Optional[dict] = None) -> None:
  """Refuse to train an arch of ``workdir`` again on other devices than the run's own (on a CPU,
  other cores too, where the run recorded them): the merged curves would be of another
  arithmetic than the rest of the run.

  Args:
    workdir: a finished sweep.
    here: this process's devices; None: ``devices_here()``.

  Raises:
    WorkdirError: naming both, if they differ.
  """
  recorded = recorded_devices(workdir)
  here = here or devices_here()
  if recorded is None or all(here.get(key) == value for key, value in recorded.items()):
    return
  how = ""
  if recorded["backend"] == "cpu":
    cores = recorded.get("cpu_cores")
    pinned = f", pinned to {cores} core(s): taskset -c 0-{cores - 1} ..." if cores else ""
    how = f" (--cpu_devices={recorded['device_count']}{pinned})"
  raise WorkdirError(f"workdir {workdir} was trained on {_devices(recorded)} ({VERSIONS}) and "
                     f"this process has {_devices(here)}: its numbers differ with the devices, "
                     f"so the retrained curves would not match the rest of the run. Retrain it "
                     f"on {_devices(recorded)}{how}")


def cpu_devices_for(workdirs: Sequence[str]) -> int:
  """How many devices to split a CPU into so that one process retrains ``workdirs`` on the
  devices they were made on (before JAX starts; no effect on an accelerator): their recorded
  CPU device count, or 1 when none records a CPU count.

  Raises:
    WorkdirError: if CPU runs of different device counts are given (one process has one).
  """
  counts = {}
  for workdir in workdirs:
    recorded = recorded_devices(workdir)
    if recorded is not None and recorded["backend"] == "cpu":
      counts[workdir] = recorded["device_count"]
  if len(set(counts.values())) > 1:
    named = "; ".join(f"{w}: {n}" for w, n in counts.items())
    raise WorkdirError(f"these runs were made on different numbers of CPU devices ({named}): "
                       f"retrain them in one command per number")
  return next(iter(counts.values()), 1)


def check_registered(workdir: str, config: ml_collections.ConfigDict) -> None:
  """Refuse a run whose normalisation or task is not registered in this process.

  Raises:
    WorkdirError: naming the field and its value, if a plugin's module was not loaded.
  """
  for field, value, registered in (
      ("attention.name", config.attention.name, attention_registry.names()),
      ("task.name", config.task.name, tasks.names())):
    if value and value not in registered:
      raise WorkdirError(f"workdir {workdir} holds a run of config.{field}={value!r}, which is "
                         f"not registered here (one of {registered}): load the module that "
                         f"registers it first (--plugins=<module>)")


def check_retrainable(workdir: str, arch: str) -> ml_collections.ConfigDict:
  """Everything ``retrain_arch`` needs of ``workdir``, checked before anything trains.

  Returns:
    The run's config (``artifacts.read_config``).

  Raises:
    FileNotFoundError: if ``workdir`` holds no finished sweep.
    ValueError: if ``arch`` is not one of its archs.
    WorkdirError: for devices or a normalisation or task that differ from the run's.
  """
  for name in ("config.json", artifacts.METRICS, artifacts.SUMMARY):
    if not os.path.exists(os.path.join(workdir, name)):
      raise FileNotFoundError(f"{workdir} holds no finished sweep: it lacks {name}")
  config = artifacts.read_config(workdir)
  retrain_config(config, arch)
  check_registered(workdir, config)
  check_devices(workdir)
  return config


def _utc(seconds: float) -> str:
  return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
      "%Y-%m-%dT%H:%M:%SZ")


def record(workdir: str, plan: SweepPlan, arch: str) -> dict:
  """Add (or update) ``arch``'s entry in ``<workdir>/retrained.json``.

  Args:
    workdir: the run.
    plan: its plan.
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
      "config": f"{sub}/config.json", "versions": f"{sub}/{VERSIONS}",
      "grids": [grid.name for grid in plan.grids_of(arch)],
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
    FileNotFoundError, ValueError, WorkdirError: as ``check_retrainable``, before anything is
      trained or written.
  """
  config = check_retrainable(workdir, arch)
  plan, sub_plan = SweepPlan.of(config), SweepPlan.of(retrain_config(config, arch))
  sub = sub_workdir(workdir, arch)
  run_sweep(sub_plan.config, sub, show_progress=show_progress, tensorboard=tensorboard)
  artifacts.replace_arch(os.path.join(workdir, artifacts.METRICS), plan, arch,
                         artifacts.read_results(sub, sub_plan))
  record(workdir, plan, arch)
  summary = resummarise(workdir)
  shutil.rmtree(os.path.join(sub, "checkpoints"), ignore_errors=True)
  return summary
