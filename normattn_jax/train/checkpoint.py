"""Workdirs and the orbax checkpoints in them.

A workdir belongs to the config that started it (its ``config.json``): ``open_workdir`` resumes
it with an equal config, refuses another one before anything in it is written, or moves it aside
to start afresh when asked. A killed run restarted with the same command restores the newest
checkpoint that restores and, because data and dropout keys are functions of (model key, step),
ends with the same numbers.
"""
from __future__ import annotations

import datetime
import json
import os
import warnings
from typing import Optional

import jax
import ml_collections
import orbax.checkpoint as ocp
from etils import epath

from normattn_jax._extras import versions
from normattn_jax.train import multihost
from normattn_jax.train.migrate import with_current_names
from normattn_jax.train.sections import flat_fields

# The fields a workdir may be resumed (or rerun) with changed, per kind of run: they change only
# what is logged along the way, how often checkpoints are saved or where data is cached, never the
# results. Every other field changes the results. A sweep's ``train.eval_every`` is not among them:
# its summary is the best over the evaluations; pre-training evaluates at the end whatever it is.
MAY_DIFFER = {
    "sweep": ("train.checkpoint_every",),
    "pretraining": ("train.log_every", "train.eval_every", "train.checkpoint_every",
                    "data.cache_dir"),
    "finetuning": ("train.checkpoint_every", "task.cache_dir"),
    # analysis.causal_lm_keys: log_every sets its scan's length and its checkpoints' numbering.
    "causal_lm": ("train.checkpoint_every", "data.cache_dir"),
    # a report card (reporting.report_card): its normalisation, options and scale, all results
    "report_card": (),
}
_SHOWN = 8  # differing fields named in an error, the rest counted
ITEM = "default"  # the folder of a step that holds the tree (orbax's single item)


class WorkdirError(ValueError):
  """A workdir that cannot serve this run; the message names it, says why and what to do."""


class DamagedCheckpointWarning(UserWarning):
  """A checkpoint that does not restore was skipped for an older one."""


class _Absent:
  def __repr__(self):
    return "(absent)"


ABSENT = _Absent()


def config_json(config: ml_collections.ConfigDict) -> dict:
  """The config as ``config.json`` stores it (tuples as lists)."""
  return json.loads(config.to_json())


def config_differences(stored: dict, new: dict, may_differ=()) -> list[tuple[str, object, object]]:
  """``(field, stored value, new value)`` for each dotted field that differs, those in
  ``may_differ`` aside; a field only one side has is ``ABSENT`` on the other."""
  old, now = flat_fields(stored), flat_fields(new)
  return [(field, old.get(field, ABSENT), now.get(field, ABSENT))
          for field in sorted(old.keys() | now.keys())
          if field not in may_differ and old.get(field, ABSENT) != now.get(field, ABSENT)]


def _show(value) -> str:
  return repr(value) if value is ABSENT else json.dumps(value)


def check_workdir(workdir: str, config: ml_collections.ConfigDict, kind: str) -> None:
  """Raise ``WorkdirError`` unless ``workdir`` is new or holds a run of this config (up to the
  fields ``MAY_DIFFER[kind]``); it reads, never writes."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return
  afresh = "start afresh (--afresh, afresh=True) to move it aside"
  try:
    with open(path) as f:
      stored = json.load(f)
  except (OSError, ValueError) as err:
    raise WorkdirError(f"workdir {workdir}: cannot read its config.json ({err}); "
                       f"use another workdir or {afresh}") from None
  differences = config_differences(with_current_names(stored, kind), config_json(config),
                                   MAY_DIFFER[kind])
  if differences:
    named = "; ".join(f"{field} was {_show(old)}, now {_show(new)}"
                      for field, old, new in differences[:_SHOWN])
    more = f"; and {len(differences) - _SHOWN} more" if len(differences) > _SHOWN else ""
    raise WorkdirError(f"workdir {workdir} holds a run of another config: {named}{more}. Rerun "
                       f"with its config, use another workdir, or {afresh}")


def move_aside(workdir: str) -> Optional[str]:
  """Rename a non-empty ``workdir`` to ``<workdir>.replaced-<UTC time>`` (nothing is deleted);
  returns the new path, or None when there was nothing to move."""
  if not os.path.isdir(workdir) or not os.listdir(workdir):
    return None
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
  base = f"{os.path.normpath(workdir)}.replaced-{stamp}"
  target, count = base, 1
  while os.path.exists(target):
    count += 1
    target = f"{base}-{count}"
  os.rename(workdir, target)
  return target


def write_json(path: str, tree, **dump_args) -> None:
  """Write whole or not at all: a killed write leaves the old file (or none)."""
  partial = path + ".partial"
  with open(partial, "w") as f:
    json.dump(tree, f, **dump_args)
  os.replace(partial, path)


def open_workdir(workdir: str, config: ml_collections.ConfigDict, kind: str, *,
                 afresh: bool = False) -> Optional[dict]:
  """Make ``workdir`` this run's before anything in it is written: check it (``check_workdir``)
  or, with ``afresh``, move it aside; then store ``config.json`` if it has none, and the
  package versions of an unfinished run (``write_versions``). Returns the
  stored summary when the workdir holds this config's finished run (``summary.json`` is written
  last), so that a rerun leaves it as it is; else None."""
  chief = multihost.is_chief()  # on several hosts, one moves and writes
  if afresh:
    moved = move_aside(workdir) if chief else None
    if moved:
      print(f"moved the old workdir aside to {moved}")
  else:
    check_workdir(workdir, config, kind)
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "config.json")
  if chief and not os.path.exists(path):
    write_json(path, config_json(config), indent=2, sort_keys=True)
  summary = os.path.join(workdir, "summary.json")
  if chief and not os.path.exists(summary):
    write_versions(workdir)
  multihost.sync("normattn_jax open_workdir")
  if not os.path.exists(summary):
    return None
  print(f"{workdir} holds this config's finished run: its results stay as they are")
  with open(summary) as f:
    return json.load(f)


def write_versions(workdir: str) -> dict:
  """Store ``versions.json``: python, devices and package versions (``_extras.versions``), so
  that a result can be reproduced. A run resumed under other versions adds them to the list
  ``resumed_with`` and keeps those it started with."""
  path = os.path.join(workdir, "versions.json")
  current = versions()
  try:
    with open(path) as f:
      stored = json.load(f)
  except (OSError, ValueError):
    stored = None
  if stored is None:
    stored = current
  elif {k: v for k, v in stored.items() if k != "resumed_with"} != current \
      and current not in stored.get("resumed_with", []):
    stored.setdefault("resumed_with", []).append(current)
  else:
    return stored
  write_json(path, stored, indent=2, sort_keys=True)
  return stored


class GridCheckpoints:
  """Save / restore ``{"state": stacked TrainState, "metrics": {...}}`` keyed by evaluations
  done (for pre-training: by steps done)."""

  def __init__(self, directory: str, max_to_keep: int = 2):
    self.directory = os.path.abspath(directory)
    self.options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    self.manager = ocp.CheckpointManager(self.directory, options=self.options)

  def latest(self):
    return self.manager.latest_step()

  def save(self, evals_done: int, tree) -> None:
    self.manager.save(evals_done, args=ocp.args.StandardSave(tree))
    self.manager.wait_until_finished()

  def restore(self, evals_done: int, like):
    """The checkpoint of ``evals_done`` evaluations, shaped (and sharded) as ``like``.

    It reads this process's shards without waiting for the other processes (the manager's
    restore would wait for them, and a process whose shards do not read would never come).

    Args:
      evals_done: the step.
      like: a tree of arrays (or ``jax.ShapeDtypeStruct``) as the checkpoint's tree.

    Returns:
      The restored tree.
    """
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    handler = ocp.StandardCheckpointHandler()
    try:
      return handler.restore(epath.Path(self.directory) / str(evals_done) / ITEM,
                             args=ocp.args.StandardRestore(abstract))
    finally:
      handler.close()

  def restore_newest(self, like):
    """``(step, tree)`` of the newest checkpoint that restores in every process, ``(None,
    None)`` without any. Newer ones that do not (a truncated file, an empty step folder, shards
    of one process that do not read) are skipped with a warning and deleted, so that the
    resumed run saves those steps again. None restoring is an error."""
    damaged, reasons = [], []
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        tree, reason = self.restore(step, like), None
      except Exception as err:  # orbax and tensorstore raise many kinds
        tree, reason = None, (f"{type(err).__name__}: "
                              + (str(err).strip().splitlines() or [""])[0][:200])
      if not multihost.everywhere(reason is None):  # every process resumes from the same step
        reasons.append(reason or "another process could not restore its shards")
        warnings.warn(f"skipped checkpoint {os.path.join(self.directory, str(step))}: it does not "
                      f"restore ({reasons[-1]})", DamagedCheckpointWarning, stacklevel=2)
        damaged.append(step)
        continue
      for newer in damaged:
        self.manager.delete(newer)
      return step, tree
    if damaged:
      raise WorkdirError(f"no checkpoint in {self.directory} restores (steps {sorted(damaged)}; "
                         f"the newest: {reasons[0]}); move the workdir aside or start afresh "
                         "(--afresh, afresh=True)")
    return None, None

  def close(self) -> None:
    self.manager.close()
