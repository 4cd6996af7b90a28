"""What every run on the grid engine does around its chunks: restore the newest checkpoint,
record each evaluation, save checkpoints, and stop early when its budget runs out; the one
``Budget`` and the one ``Interrupted`` of the project. ``RunHooks.train`` is the one loop around
``grid.run_grid`` that every kind's grids train with (sweeps, fine-tuning, the causal-LM and
majority analyses, the report card's LMs); pre-training uses the hooks around its data-parallel
steps (the state alone checkpointed). The kinds of run reach it through one driver,
``runs.run``, which takes the run's ``Budget``.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Optional

import jax
import numpy as np

from normattn_jax.train import multihost
from normattn_jax.train.checkpoint import GridCheckpoints
from normattn_jax.train.grid import GridRun, run_grid
from normattn_jax.validation import check_float, check_int


class Interrupted(Exception):
  """A run stopped by its ``Budget`` (chunks: a simulated kill, for tests; minutes: a wall
  time); it resumes from its checkpoints."""


class Budget:
  """The chunks (or steps) this call may still run, None: no limit; and the minutes of wall time
  after which it stops, 0: no limit. Time stops a call only once it has run a chunk (the chunk
  that passes the minutes ends; or, where the next chunk was already dispatched then,
  ``RunHooks.state_needed``, that one), so that each call of a run stopped by time gets further.

  Raises:
    ValueError: for chunks that are not an integer >= 0, or minutes that are not a number >= 0.
  """

  def __init__(self, chunks: Optional[int] = None, minutes: float = 0.0,
               clock: Callable[[], float] = time.monotonic):
    if chunks is not None:
      check_int("chunks", chunks, low=0)
    check_float("minutes", minutes, 0)
    self.left = chunks
    self.ran = 0  # chunks this call has run
    self.clock = clock
    self.deadline = clock() + 60.0 * minutes if minutes else None

  def spend(self, count: int = 1) -> None:
    """Count ``count`` chunks run."""
    self.ran += count
    if self.left is not None:
      self.left -= count

  def check(self, name: str, done: int, num_chunks: int) -> None:
    """Raise ``Interrupted`` before a chunk of ``name`` that the budget cannot pay.

    Args:
      name: what runs (a grid's name, "pre-training"), for the message.
      done: the chunks it has done.
      num_chunks: the chunks it runs in all.

    Raises:
      Interrupted: if the budget is spent (chunks or time) and chunks are left.
    """
    if done >= num_chunks:
      return
    if self.left is not None and self.left <= 0:
      raise Interrupted(f"{name}: stopped after {done} of {num_chunks}")
    if self.out_of_time():
      raise Interrupted(f"{name}: out of time after {done} of {num_chunks}")

  def out_of_time(self) -> bool:
    """Whether the minutes are spent, once a chunk has run."""
    return self.deadline is not None and bool(self.ran) and self.clock() >= self.deadline


def trained_steps(state) -> Optional[int]:
  """The training step a (restored) state is at: the largest ``step`` of its models, read from
  this process's shards; None for a state without a ``step``."""
  step = getattr(state, "step", None)
  if step is None:
    return None
  shards = getattr(step, "addressable_shards", None)
  values = [np.asarray(s.data) for s in shards] if shards else [np.asarray(step)]
  values = [v for v in values if v.size]
  return int(max(v.max() for v in values)) if values else None


def resumed_message(name: str, state, done: int, num_chunks: int, checkpoint: str) -> str:
  """What a resumed run says: from which step (``trained_steps``, else the chunks done) and
  which checkpoint.

  Args:
    name: what runs (a grid's name, "pre-training").
    state: the restored state.
    done: the chunks (or steps) the checkpoint holds.
    num_chunks: the chunks the run runs in all.
    checkpoint: the checkpoint's folder.

  Returns:
    ``"<name>: resumed from step N (checkpoint <folder>)"``.
  """
  steps = trained_steps(state)
  where = f"step {steps}" if steps is not None else f"{done} of {num_chunks} chunks"
  return f"{name}: resumed from {where} (checkpoint {checkpoint})"


class RunHooks:
  """The one loop every kind of run trains its grids with (``train``: ``grid.run_grid`` with
  these hooks), and ``run_grid``'s ``resume`` and ``on_chunk`` for a run that checkpoints,
  records its evaluations and may be stopped by a budget; a context manager that closes its
  checkpoints (pre-training uses the hooks around its own data-parallel steps).

  Args:
    directory: the checkpoints' folder, or None for none.
    every: checkpoint every that many chunks (and after the last); 0: only when the budget's
      time stops the run (whatever ``every``, the chunk that passes the time is kept, so that
      the call the run's stop asks for resumes rather than starting over).
    num_chunks: the chunks the grid runs in all.
    record: ``(chunk indices, metrics so far) -> None``: log those chunks' evaluations (called
      for the restored ones on resume, so a resumed history reads as an uninterrupted one).
    on_resume: ``(grid, chunks done, state, per_model) -> None``, called once after the
      restore, before any chunk (e.g. a run's log opened at the step it resumes from).
    budget: the run's ``Budget``; None: no limit.
    name: the grid's name, for messages.
    state_only: checkpoint the state alone, not the metrics recorded so far (a run whose history
      lives in its ``RunLog``, which resumes it: pre-training, the majority run); a resume then
      records nothing.
    may_grow: the run's target (``num_chunks``) may be raised between calls (the majority run,
      resumed for more steps): checkpoint after every chunk, so that the last one is never
      trained twice, whatever target a later call sets.
    minutes: also checkpoint after the first chunk that ends that many minutes (of the budget's
      clock) after the last checkpoint (or the start); 0: not by time.

  Attributes:
    checkpoint_seconds: the wall seconds the run was blocked by its checkpoints (saves, and the
      wait for the last one's files at ``close``).
  """

  def __init__(self, directory: Optional[str], every: int, num_chunks: int, *,
               record: Callable = lambda indices, metrics: None,
               on_resume: Optional[Callable] = None, budget: Optional[Budget] = None,
               name: str = "grid", state_only: bool = False, may_grow: bool = False,
               minutes: float = 0.0):
    check_float("minutes", minutes, 0)
    self.directory = directory
    # with checkpoints off, a folder left by a time stop is still resumed from
    self.checkpoints = (GridCheckpoints(directory) if directory and (every or may_grow or minutes
                                                                     or os.path.isdir(directory))
                        else None)
    self.every, self.num_chunks, self.name = (1 if may_grow else every), num_chunks, name
    self.record, self.on_resume = record, on_resume
    self.budget = budget or Budget()
    self.state_only = state_only
    self.minutes = minutes
    self.saved_at = self.budget.clock()
    self.checkpoint_seconds = 0.0

  def train(self, grid, keys, per_model, *, on_host: Optional[Callable] = None) -> GridRun:
    """Train ``grid`` (``grid.run_grid``) from its newest checkpoint to ``num_chunks``, with
    these hooks, and close the checkpoints.

    Args:
      grid: the compiled programs (``Grid.of``).
      keys: per-model raw key data ``[models, key size]``.
      per_model: each model's inputs, or ``chunk index -> them`` (``run_grid``).
      on_host: what a chunk's outputs become on the host before they are recorded.

    Returns:
      ``GridRun``: every chunk's metrics and the final states.

    Raises:
      Interrupted: when the budget stops the run, its checkpoint written.
    """
    with self:
      return run_grid(grid, keys, per_model, self.num_chunks, resume=self.resume,
                      on_chunk=self.on_chunk, on_host=on_host, state_needed=self.state_needed)

  def resume(self, grid, state, per_model):
    """The newest checkpoint that restores, else a fresh start; see ``run_grid``.

    Returns:
      ``(chunks done, state sharded as the given one, metrics {name: [chunks, models]})``.
    """
    done, metrics = 0, {}
    if self.checkpoints is not None and self.checkpoints.latest() is not None:
      like = {"state": state} if self.state_only else {"state": state, "metrics": None}
      done, restored = self.checkpoints.restore_newest(like)
      state = jax.device_put(restored["state"], jax.tree.map(lambda a: a.sharding, state))
      metrics = {k: np.array(v) for k, v in restored.get("metrics", {}).items()}
      if multihost.is_chief():
        print(resumed_message(self.name, state, done, self.num_chunks,
                              os.path.join(self.checkpoints.directory, str(done))), flush=True)
    if not self.state_only:
      self.record(range(done), metrics)
    if self.on_resume is not None:
      self.on_resume(grid, done, state, per_model)
    self.budget.check(self.name, done, self.num_chunks)
    return done, state, metrics

  def finished(self) -> Optional[dict]:
    """The metrics of a run whose newest checkpoint holds its last chunk, read from that
    checkpoint alone (no grid compiled, no state to restore into) and recorded as a resume
    records them: how a resumed sweep passes its finished grids without compiling them. None
    where chunks are left, where the newest checkpoint that restores is an earlier one, and for
    a run whose checkpoints hold no metrics (``state_only``)."""
    if self.state_only or self.checkpoints is None or self.checkpoints.latest() != self.num_chunks:
      return None
    done, tree = self.checkpoints.restore_newest({"state": None, "metrics": None})
    if done != self.num_chunks:
      return None
    metrics = {key: np.array(value) for key, value in tree["metrics"].items()}
    self.record(range(done), metrics)
    if multihost.is_chief():
      folder = os.path.join(self.checkpoints.directory, str(done))
      print(f"{self.name}: finished, {done} of {self.num_chunks} chunks (checkpoint {folder}): "
            "nothing to compile or train", flush=True)
    return metrics

  def _periodic(self, done: int) -> bool:
    """Whether the checkpoint after ``done`` chunks is one of every ``every``, or the last."""
    return bool(self.every) and (done % self.every == 0 or done == self.num_chunks)

  def _time_says(self, flag: bool) -> bool:
    """A decision of the clock taken alike in every process (any one's is every one's): each
    saves its shards of the same checkpoints."""
    return bool(flag) if jax.process_count() == 1 else not multihost.everywhere(not flag)

  def _timed(self) -> bool:
    """Whether ``minutes`` have passed since the last checkpoint."""
    return bool(self.minutes) and self.budget.clock() - self.saved_at >= 60.0 * self.minutes

  def _clock_due(self) -> bool:
    """Whether the clock asks for the state now: ``minutes`` passed since the last checkpoint
    (where there is a folder to save to), or the budget's time is spent; decided alike in every
    process (``_time_says``)."""
    timed = bool(self.minutes and self.directory)
    late = self.budget.deadline is not None
    if not (timed or late):
      return False
    return self._time_says((timed and self._timed())
                           or (late and self.budget.clock() >= self.budget.deadline))

  def state_needed(self, done: int) -> bool:
    """``run_grid``'s ``state_needed``: whether ``on_chunk`` after ``done`` chunks will read the
    state (asked before it runs): when a checkpoint is due (every ``every``, the last, by
    ``minutes``) or the budget stops there (its last chunk, or its time passed). Where not,
    the next chunk is already running when ``on_chunk`` gets no state; a time that passes in
    between is acted on after that next chunk (it checkpoints, or stops the run, in this one's
    stead).
    """
    if self.budget.left is not None and self.budget.left <= 1:
      return True
    return bool(self.directory and self._periodic(done)) or self._clock_due()

  def on_chunk(self, done: int, state, metrics: dict) -> None:
    """Record the chunk's evaluation, checkpoint, then pay the chunk from the budget; with no
    state (``run_grid`` ran the next chunk already: ``state_needed``), record and pay only."""
    self.record([done - 1], metrics)
    self.budget.spend()
    if state is None:
      return
    # a run stopped by time keeps every chunk it ran: the next call resumes from there
    if self.directory and (self._periodic(done) or self._clock_due()):
      self.save(done, {"state": state} if self.state_only
                else {"state": state, "metrics": metrics})
    self.budget.check(self.name, done, self.num_chunks)

  def save(self, done: int, tree: dict) -> None:
    """Checkpoint ``tree`` after ``done`` chunks (asynchronously: ``GridCheckpoints.save``)."""
    started = time.perf_counter()
    if self.checkpoints is None:
      self.checkpoints = GridCheckpoints(self.directory)
    self.checkpoints.save(done, tree)
    self.saved_at = self.budget.clock()
    self.checkpoint_seconds += time.perf_counter() - started

  def close(self) -> None:
    """Wait for the checkpoints being written and release them."""
    if self.checkpoints is not None:
      started = time.perf_counter()
      self.checkpoints.close()
      self.checkpoint_seconds += time.perf_counter() - started

  def __enter__(self) -> "RunHooks":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
