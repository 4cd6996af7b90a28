"""The models axis of a grid: the one order of every grid's flattened leading axis
(``seed_innermost``), and the layout of a grid whose models differ by one group each besides
their seed (``GroupSeedAxis``: a fine-tuning's learning rates x seeds, the majority run's
variants x seeds). A sweep's layout (learning rate x swept value x seed) is
``normattn_jax.sweep.layout.ModelsAxis``, built on the same order.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from normattn_jax import _moved


def seed_innermost(*sizes: int) -> tuple[np.ndarray, ...]:
  """Each model's index along every axis of ``sizes``, flattened with the last axis (the seeds)
  innermost: the one order of every grid's models axis.

  Args:
    *sizes: the length of each axis, the seeds last.

  Returns:
    One ``[prod(sizes)]`` int32 array per axis, in flat order.
  """
  return tuple(np.indices(sizes).reshape(len(sizes), -1).astype(np.int32))


@dataclasses.dataclass(frozen=True)
class GroupSeedAxis:
  """Groups x seeds, flattened with the seed innermost: a grid whose models differ by one
  group each (a fine-tuning's learning rate, a majority run's variant) besides their seed.

  Attributes:
    num_groups: the groups, e.g. ``len(config.learning_rates)``.
    num_seeds: seeds per group; seed s has the same initialisation and data in every group.
  """
  num_groups: int
  num_seeds: int

  @property
  def num_models(self) -> int:
    """The number of models: groups x seeds."""
    return self.num_groups * self.num_seeds

  def group_indices(self) -> np.ndarray:
    """Each model's group index, ``[models]`` int32 in flat order."""
    return seed_innermost(self.num_groups, self.num_seeds)[0]

  def seed_indices(self) -> np.ndarray:
    """Each model's seed index, ``[models]`` int32 in flat order."""
    return seed_innermost(self.num_groups, self.num_seeds)[1]

  def rows(self, group: int) -> slice:
    """The flat indices of one group's models, seed 0 first.

    Args:
      group: the group's index.

    Returns:
      A slice of ``num_seeds`` models.
    """
    return slice(group * self.num_seeds, (group + 1) * self.num_seeds)

  def unflatten(self, curves: np.ndarray) -> np.ndarray:
    """``[evals, models]`` -> ``[evals, groups, seeds]``.

    Args:
      curves: ``[evals, num_models]``, in flat order.

    Returns:
      A reshaped view of ``curves``.
    """
    return curves.reshape((len(curves), self.num_groups, self.num_seeds))


def __getattr__(name: str):
  """The previous release's names of this module (``normattn_jax._moved``)."""
  return _moved.moved_attribute(__name__, name)
