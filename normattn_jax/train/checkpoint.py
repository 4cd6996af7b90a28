"""Workdirs and the orbax checkpoints in them.

A workdir belongs to the config that started it (its ``config.json``): ``open_workdir`` resumes
it with an equal config, refuses another one before anything in it is written, or moves it aside
to start afresh when asked. A killed run restarted with the same command restores the newest
checkpoint that restores and, because data and dropout keys are functions of (model key, step),
ends with the same numbers. A workdir serves one run at a time: its chief holds the lock file
``run.lock`` (``lock_workdir``) from ``open_workdir`` until the run ends (``releases_workdir``).
"""
from __future__ import annotations

import atexit
import datetime
import functools
import inspect
import json
import os
import socket
import warnings
from typing import Callable, Optional, Union

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from normattn_jax._extras import versions
from normattn_jax.train import kinds, multihost
from normattn_jax.train.migrate import with_current_names
from normattn_jax.validation import flat_fields

_SHOWN = 8  # differing fields named in an error, the rest counted
ITEM = "default"  # the folder of a step that holds the tree (orbax's single item)
LOCK = "run.lock"  # in a workdir: {"pid", "host"} of the run that holds it
_HELD: set = set()  # the lock files this process holds, released at exit at the latest


class WorkdirError(ValueError):
  """A workdir that cannot serve this run; the message names it, says why and what to do."""


class DeviceCountWarning(UserWarning):
  """A run resumed on another number of devices (or, on a CPU, of cores) than it started on."""


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


def check_workdir(workdir: str, config: ml_collections.ConfigDict,
                  kind: Union[kinds.RunKind, str]) -> None:
  """Raise ``WorkdirError`` unless ``workdir`` is new or holds a run of this config (up to the
  fields the kind may change, ``kinds.RunKind.may_differ``; ``kind`` a ``RunKind`` or its
  name); it reads, never writes."""
  kind = kinds.get(kind) if isinstance(kind, str) else kind
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return
  afresh = "start afresh (--afresh, afresh=True) to move it aside"
  try:
    stored = read_json(path)
  except (OSError, ValueError) as err:
    raise WorkdirError(f"workdir {workdir}: cannot read its config.json ({err}); "
                       f"use another workdir or {afresh}") from None
  differences = config_differences(with_current_names(stored, kind), config_json(config),
                                   kind.may_differ)
  if differences:
    named = "; ".join(f"{field} was {_show(old)}, now {_show(new)}"
                      for field, old, new in differences[:_SHOWN])
    more = f"; and {len(differences) - _SHOWN} more" if len(differences) > _SHOWN else ""
    raise WorkdirError(f"workdir {workdir} holds a run of another config: {named}{more}. Rerun "
                       f"with its config, use another workdir, or {afresh}")


def move_aside(workdir: str) -> Optional[str]:
  """Rename a non-empty ``workdir`` to ``<workdir>.replaced-<UTC time>`` (nothing is deleted);
  returns the new path, or None when there was nothing to move."""
  if not os.path.isdir(workdir) or not set(os.listdir(workdir)) - {LOCK}:
    return None
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
  base = f"{os.path.normpath(workdir)}.replaced-{stamp}"
  target, count = base, 1
  while os.path.exists(target):
    count += 1
    target = f"{base}-{count}"
  os.rename(workdir, target)
  return target


def read_json(path: str) -> dict:
  """The JSON object a run stored at ``path`` (``config.json``, ``summary.json``, ...).

  Args:
    path: the file.

  Returns:
    Its tree, a dict.

  Raises:
    OSError: if the file cannot be opened.
    ValueError: naming the file, if it is not JSON (a write cut short) or holds no object.
  """
  with open(path) as f:
    try:
      tree = json.load(f)
    except ValueError as err:  # json.JSONDecodeError, UnicodeDecodeError
      raise ValueError(f"{path} is not valid JSON ({err})") from None
  if not isinstance(tree, dict):
    raise ValueError(f"{path} holds a JSON {type(tree).__name__}, not an object of fields")
  return tree


def finished_summary(workdir: str) -> dict:
  """The ``summary.json`` of a finished run, for the scripts that compare finished runs.

  Args:
    workdir: the run's workdir.

  Returns:
    The summary's tree.

  Raises:
    FileNotFoundError: naming the workdir, if the run has not finished (no ``summary.json``).
    ValueError: naming the file, if it is damaged (``read_json``).
  """
  path = os.path.join(workdir, "summary.json")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"workdir {workdir} has no summary.json: its run has not finished "
                            "(or it is no run's workdir)")
  return read_json(path)


def write_json(path: str, tree, **dump_args) -> None:
  """Write whole or not at all: a killed write leaves the old file (or none)."""
  partial = path + ".partial"
  with open(partial, "w") as f:
    json.dump(tree, f, **dump_args)
  os.replace(partial, path)


def _this_host() -> str:
  return socket.gethostname()


def _started(pid: int) -> Optional[str]:
  """When process ``pid`` of this host started, as the kernel counts it since this boot (Linux:
  ``/proc``), or None where that cannot be read: a lock's pid that lives but started at another
  time is another process, the lock's own long gone (a pid used again)."""
  try:
    with open("/proc/sys/kernel/random/boot_id") as f:
      boot = f.read().strip()
    with open(f"/proc/{pid}/stat") as f:
      fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces
    return f"{boot}:{fields[19]}"  # the 22nd field, starttime (the 3rd after the name is [0])
  except (OSError, IndexError):
    return None


def _me() -> dict:
  """This process's lock record: pid, host, and when it started where that can be read."""
  me = {"pid": os.getpid(), "host": _this_host()}
  started = _started(os.getpid())
  return me if started is None else dict(me, started=started)


def _alive(pid: int) -> bool:
  """Whether process ``pid`` of this host runs (one of another user's counts)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def _read_lock(path: str) -> Optional[dict]:
  """The ``{"pid", "host"}`` of a lock file, None when there is none, or ``{}`` for a file that
  does not read as one."""
  try:
    with open(path) as f:
      holder = json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, ValueError):
    return {}
  ok = (isinstance(holder, dict) and isinstance(holder.get("pid"), int)
        and isinstance(holder.get("host"), str)
        and isinstance(holder.get("started", ""), str))
  return holder if ok else {}


def lock_holder(workdir: str) -> Optional[dict]:
  """The ``{"pid", "host"}`` of the run that holds ``workdir``, None when none does, or ``{}``
  for a lock file that does not read as one."""
  return _read_lock(os.path.join(workdir, LOCK))


def is_stale(holder: dict, host: str) -> bool:
  """A lock of a dead process on this host, or of a pid that another process took since (it
  started at another time than the lock says); another host's cannot be told, so it is live,
  and so is a lock without its start time whose pid runs."""
  if not holder or holder["host"] != host:
    return False
  if not _alive(holder["pid"]):
    return True
  return "started" in holder and _started(holder["pid"]) not in (None, holder["started"])


def _create_lock(path: str, holder: dict) -> bool:
  """Write the lock file whole, unless one exists: a link of a written file (atomic)."""
  partial = f"{path}.{holder['pid']}.partial"
  with open(partial, "w") as f:
    json.dump(holder, f)
  try:
    os.link(partial, path)
    return True
  except FileExistsError:
    return False
  finally:
    os.remove(partial)


def _take_over(path: str, stale: dict) -> None:
  """Remove a stale lock. It is moved aside first and read again: one that another run took
  over meanwhile is put back, and the caller's next attempt finds it."""
  aside = f"{path}.stale-{os.getpid()}"
  try:
    os.rename(path, aside)
  except FileNotFoundError:
    return
  if _read_lock(aside) != stale:
    try:
      os.link(aside, path)
    except FileExistsError:
      pass
  os.remove(aside)


def lock_workdir(workdir: str) -> None:
  """Make this process the one run of ``workdir`` (creating it): write ``run.lock`` with its pid
  and host, taking over the lock of a dead process on this host.

  Raises:
    WorkdirError: a live run (or one of another host, which cannot be told dead) holds it.
  """
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, LOCK)
  me = _me()
  for _ in range(3):
    if _create_lock(path, me):
      _HELD.add(os.path.abspath(path))
      return
    holder = lock_holder(workdir)
    if holder is None:
      continue  # released meanwhile
    if not is_stale(holder, me["host"]):
      raise WorkdirError(_in_use(workdir, holder, path))
    warnings.warn(f"workdir {workdir}: taking over the lock of process {holder['pid']}, which "
                  "is no longer running (or its pid is another process's now)", stacklevel=2)
    _take_over(path, holder)
  raise WorkdirError(_in_use(workdir, lock_holder(workdir) or {}, path))


def _in_use(workdir: str, holder: dict, path: str) -> str:
  who = (f"process {holder['pid']} on {holder['host']}" if holder
         else "a run whose lock file does not read")
  return (f"workdir {workdir} is in use by {who}: one run at a time writes a workdir. Wait for "
          f"that run to end or use another workdir; if it is gone (it ran on another host, or "
          f"its lock was damaged), delete {path}")


def unlock_workdir(workdir: str) -> None:
  """Release ``workdir``'s lock if this process holds it (another run's is left alone)."""
  path = os.path.abspath(os.path.join(workdir, LOCK))
  if path not in _HELD:
    return
  _HELD.discard(path)
  if lock_holder(workdir) == _me():
    os.remove(path)


@atexit.register
def _release_all() -> None:
  """At exit, whatever a run left held (a run killed outright leaves a stale lock)."""
  for path in list(_HELD):
    unlock_workdir(os.path.dirname(path))


def releases_workdir(run: Callable) -> Callable:
  """Decorate a run function (with an argument ``workdir``) that opens its workdir
  (``open_workdir``) so that the workdir's lock is released however the run ends."""
  signature = inspect.signature(run)

  @functools.wraps(run)
  def wrapped(*args, **kwargs):
    workdir = signature.bind(*args, **kwargs).arguments["workdir"]
    try:
      return run(*args, **kwargs)
    finally:
      unlock_workdir(workdir)
  return wrapped


def _lock_on_chief(workdir: str, chief: bool) -> None:
  """The chief locks ``workdir``; every process fails alike when it cannot."""
  problem = None
  if chief:
    try:
      lock_workdir(workdir)
    except WorkdirError as err:
      problem = err
  if not multihost.everywhere(problem is None):
    raise problem or WorkdirError(f"workdir {workdir}: the chief (process 0) could not lock it; "
                                  "see its error")


def open_workdir(workdir: str, config: ml_collections.ConfigDict,
                 kind: Union[kinds.RunKind, str], *, afresh: bool = False) -> Optional[dict]:
  """Make ``workdir`` this run's before anything in it is written: lock it (the chief,
  ``lock_workdir``; the caller releases it, ``releases_workdir``), check it (``check_workdir``)
  or, with ``afresh``, move it aside; then store ``config.json`` if it has none, and the
  package versions of an unfinished run (``write_versions``). Returns the
  stored summary when the workdir holds this config's finished run (``summary.json`` is written
  last), so that a rerun leaves it as it is; that is recognised before the lock, reading only,
  so a finished run on a read-only mount reads back; else None. ``kind``: the ``RunKind`` (or
  its name) whose workdir it is."""
  kind = kinds.get(kind) if isinstance(kind, str) else kind
  if not afresh:
    finished = _finished_run(workdir, config, kind)
    if finished is not None:
      return finished
  chief = multihost.is_chief()  # on several hosts, one locks, moves and writes
  _lock_on_chief(workdir, chief)
  try:
    finished = _open_locked(workdir, config, kind, afresh, chief)
  except BaseException:
    unlock_workdir(workdir)
    raise
  if finished is not None:
    unlock_workdir(workdir)
  return finished


def _open_locked(workdir: str, config: ml_collections.ConfigDict, kind: kinds.RunKind,
                 afresh: bool, chief: bool) -> Optional[dict]:
  """``open_workdir`` once the workdir is locked."""
  if afresh:
    moved = move_aside(workdir) if chief else None
    if moved:
      unlock_workdir(workdir)  # the lock moved along: leave the old run as it was
      os.remove(os.path.join(moved, LOCK))
      lock_workdir(workdir)
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
  return _finished_run(workdir, config, kind)


def _finished_run(workdir: str, config: ml_collections.ConfigDict,
                  kind: kinds.RunKind) -> Optional[dict]:
  """The summary of this config's finished run in ``workdir``, or None; reads, never writes.

  Raises:
    WorkdirError: for a workdir of another config (``check_workdir``), or a damaged summary.
  """
  summary = os.path.join(workdir, "summary.json")
  if not os.path.exists(summary):
    return None
  check_workdir(workdir, config, kind)
  try:
    finished = read_json(summary)
  except ValueError as err:
    raise WorkdirError(f"workdir {workdir}: its summary.json, which marks a finished run, is "
                       f"damaged: {err}. Remove it to finish the run again from its newest "
                       f"checkpoint, or start afresh (--afresh, afresh=True) to move the "
                       f"workdir aside") from None
  print(f"{workdir} holds this config's finished run: its results stay as they are")
  return finished


def _devices(record: dict, cores: bool) -> str:
  devices = f"{record['device_count']} device(s)"
  return f"{devices} on {record['cpu_cores']} core(s)" if cores else devices


def write_versions(workdir: str) -> dict:
  """Store ``versions.json``: python, devices and package versions (``_extras.versions``), so
  that a result can be reproduced. A run resumed under other versions adds them to the list
  ``resumed_with`` and keeps those it started with; one resumed on another device count (or, on
  a CPU, another count of cores) says so (``DeviceCountWarning``)."""
  path = os.path.join(workdir, "versions.json")
  current = versions()
  try:
    with open(path) as f:
      stored = json.load(f)
  except (OSError, ValueError):
    stored = None
  if stored is None:
    stored = current
  else:
    devices = stored.get("device_count", current["device_count"]) != current["device_count"]
    cores = (current["backend"] == "cpu"
             and stored.get("cpu_cores", current["cpu_cores"]) != current["cpu_cores"])
    if devices or cores:
      warnings.warn(f"{workdir} was started on {_devices(stored, cores)} and resumes on "
                    f"{_devices(current, cores)}: from here on its numbers differ from an "
                    f"uninterrupted run's by float rounding, which training can amplify, not "
                    f"bit for bit (versions.json lists both)",
                    DeviceCountWarning, stacklevel=2)
    started = {k: v for k, v in stored.items() if k != "resumed_with"}
    if started == current or current in stored.get("resumed_with", []):
      return stored
    stored.setdefault("resumed_with", []).append(current)
  write_json(path, stored, indent=2, sort_keys=True)
  return stored


def host_copy(tree):
  """``tree`` with each numpy array copied (a run goes on writing its metrics arrays in place)
  and everything else (device arrays, scalars) as it is."""
  return jax.tree.map(lambda x: np.array(x, copy=True) if isinstance(x, np.ndarray) else x, tree)


class GridCheckpoints:
  """Save / restore ``{"state": stacked TrainState, "metrics": {...}}`` keyed by evaluations
  done (for pre-training: by steps done). Saves are asynchronous: ``save`` returns once the
  data are orbax's own, and the files are written while the run goes on; the next ``save``,
  ``latest``, a restore and ``close`` wait for them."""

  def __init__(self, directory: str, max_to_keep: int = 2):
    self.directory = os.path.abspath(directory)
    self.options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    self.manager = ocp.CheckpointManager(self.directory, options=self.options)

  def latest(self):
    self.manager.wait_until_finished()
    return self.manager.latest_step()

  def save(self, evals_done: int, tree) -> None:
    """Start writing ``tree`` as the checkpoint of ``evals_done``, once the previous save is
    written. It returns once nothing the caller does next can change what is written: host
    arrays are copied here (``host_copy``), and orbax copies device arrays to the host before
    its save returns (its default synchronous transfer: no limit on the bytes in flight), so
    that a state donated to the next chunk right after is not read again.

    Args:
      evals_done: the step.
      tree: the tree to save (device and host arrays).
    """
    self.manager.save(evals_done, args=ocp.args.StandardSave(host_copy(tree)))

  def wait(self) -> None:
    """Wait until every save started is written (raising a save's error)."""
    self.manager.wait_until_finished()

  def restore(self, evals_done: int, like: Optional[dict]):
    """The checkpoint of ``evals_done`` evaluations, shaped (and sharded) as ``like``.

    It reads this process's shards without waiting for the other processes (the manager's
    restore would wait for them, and a process whose shards do not read would never come).

    Args:
      evals_done: the step.
      like: ``{entry: a tree of arrays (or jax.ShapeDtypeStruct)}`` as the checkpoint's tree; an
        entry None is restored as the checkpoint stores it (its shapes and dtypes from the
        checkpoint's metadata: e.g. the host metrics recorded so far); None restores every
        entry so.

    Returns:
      The restored tree.
    """
    self.manager.wait_until_finished()
    path = epath.Path(self.directory) / str(evals_done) / ITEM
    handler = ocp.StandardCheckpointHandler()
    try:
      if like is None:
        return handler.restore(path, args=ocp.args.StandardRestore())
      stored = handler.metadata(path).tree if any(t is None for t in like.values()) else {}
      abstract = {entry: jax.tree.map(ocp.utils.to_shape_dtype_struct, tree) if tree is not None
                  else jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype),
                                    stored[entry])
                  for entry, tree in like.items()}
      return handler.restore(path, args=ocp.args.StandardRestore(abstract))
    finally:
      handler.close()

  def restore_newest(self, like):
    """``(step, tree)`` of the newest checkpoint that restores in every process, ``(None,
    None)`` without any. Newer ones that do not (a truncated file, an empty step folder, shards
    of one process that do not read) are skipped with a warning and deleted, so that the
    resumed run saves those steps again. None restoring is an error."""
    self.manager.wait_until_finished()
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


def restore_newest_state(directory: str) -> tuple[int, dict]:
  """``(step, state)`` of the newest checkpoint in ``directory`` that restores, the state as a
  tree of numpy arrays whatever class saved it (shapes from the checkpoint's own metadata).

  Args:
    directory: a ``GridCheckpoints`` folder whose checkpoints hold ``{"state": ...}``.

  Returns:
    The checkpoint's step (evaluations or steps done) and its ``state``.

  Raises:
    FileNotFoundError: if the folder holds no checkpoint.
  """
  checkpoints = GridCheckpoints(directory)
  try:
    latest = checkpoints.latest()
    if latest is None:
      raise FileNotFoundError(f"no checkpoint in {directory} (was the run made with "
                              f"train.checkpoint_every=0?)")
    step, restored = checkpoints.restore_newest(None)  # every entry, as stored
  finally:
    checkpoints.close()
  return step, jax.tree.map(np.asarray, restored["state"])
