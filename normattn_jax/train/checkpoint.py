"""Orbax checkpoints of a grid's stacked state and its metrics so far.

A killed run restarted with the same command restores the newest checkpoint and, because data
and dropout keys are functions of (model key, step), ends with the same numbers.
"""
from __future__ import annotations

import os

import jax
import orbax.checkpoint as ocp


class GridCheckpoints:
  """Save / restore ``{"state": stacked TrainState, "metrics": {...}}`` keyed by evaluations done."""

  def __init__(self, directory: str, max_to_keep: int = 2):
    self.manager = ocp.CheckpointManager(
        os.path.abspath(directory), options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True))

  def latest(self):
    return self.manager.latest_step()

  def save(self, evals_done: int, tree) -> None:
    self.manager.save(evals_done, args=ocp.args.StandardSave(tree))
    self.manager.wait_until_finished()

  def restore(self, evals_done: int, like):
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    return self.manager.restore(evals_done, args=ocp.args.StandardRestore(abstract))

  def close(self) -> None:
    self.manager.close()
