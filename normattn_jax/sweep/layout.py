"""The models axis of a sweep's grid: which learning rate, swept value and seed each model has
(``ModelsAxis``), and the name of each grid of a sweep (``grid_name``).

A sweep's order, learning rate x vmapped swept value x seed, flattened with the seed innermost
(``train.layout.seed_innermost``, the one order of every grid), is held in ``ModelsAxis``: the
programs' hyper-parameters, the scoring of cells, ``metrics.npz`` and the figures all go through
it, and nothing else knows it.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Iterator, Optional

import numpy as np

from normattn_jax.sweep.config import point_label, swept_in_program
from normattn_jax.train.layout import seed_innermost

# The per-model hyper-parameter of the sweep's programs that each vmapped sweep sets.
HYPERPARAMETER_OF = {"train.l2": "l2", "train.dropout": "dropout"}


def grid_name(arch: str, point: dict) -> str:
  """The name of one grid of a sweep, ``arch`` or ``arch[field=value]`` at a static point: its
  key prefix in ``metrics.npz``, its checkpoint folder and its TensorBoard tag.

  Args:
    arch: the architecture's name, e.g. "nap".
    point: the static sweep point, field -> value (``{}`` without a static sweep).

  Returns:
    E.g. ``"nap"`` or ``"nap[model.d_model=64]"``.
  """
  return arch + (f"[{point_label(point)}]" if point else "")


@dataclasses.dataclass(frozen=True)
class ModelsAxis:
  """Learning rates x swept values x seeds, flattened with the seed innermost.

  Attributes:
    learning_rates: one per row of the pixel plots.
    swept_field: the vmapped sweep (``"train.l2"`` or ``"train.dropout"``), or ``""`` when the
      models share every other hyper-parameter (no sweep, or a static sweep: one grid per
      point).
    swept_values: the vmapped sweep's values, or ``(None,)`` without one.
    num_seeds: seeds per (learning rate, swept value); seed s has the same initialisation and
      data in every cell.
    l2: the L2 weight of every model when ``train.l2`` is not swept.
    dropout: the dropout rate of every model when ``train.dropout`` is not swept.
  """
  learning_rates: tuple[float, ...]
  swept_field: str
  swept_values: tuple[Optional[float], ...]
  num_seeds: int
  l2: float = 0.0
  dropout: float = 0.0

  def __post_init__(self):
    if self.swept_field and self.swept_field not in HYPERPARAMETER_OF:
      raise ValueError(f"swept_field={self.swept_field!r}: no vmapped sweep; "
                       f"choose from {tuple(HYPERPARAMETER_OF)}")
    if not self.swept_field and self.swept_values != (None,):
      raise ValueError(f"swept_values={self.swept_values!r} given without a swept_field")
    if not self.learning_rates or not self.swept_values or self.num_seeds < 1:
      raise ValueError(f"an empty models axis: {len(self.learning_rates)} learning rates, "
                       f"{len(self.swept_values)} swept values, {self.num_seeds} seeds")

  @classmethod
  def of(cls, config) -> ModelsAxis:
    """The models axis of a (point) config: its vmapped sweep, if any, is the middle axis.

    Args:
      config: a sweep config (``normattn_jax.sweep.config.base_config``'s fields).

    Returns:
      The ``ModelsAxis`` of every grid the config trains.
    """
    vmapped = swept_in_program(config)
    return cls(learning_rates=tuple(float(lr) for lr in config.learning_rates),
               swept_field=config.sweep.name if vmapped else "",
               swept_values=tuple(float(v) for v in config.sweep.grid) if vmapped else (None,),
               num_seeds=int(config.num_seeds), l2=float(config.train.l2),
               dropout=float(config.train.dropout))

  @property
  def shape(self) -> tuple[int, int, int]:
    """``(learning rates, swept values, seeds)``: the unflattened axes."""
    return len(self.learning_rates), len(self.swept_values), self.num_seeds

  @property
  def num_models(self) -> int:
    """The number of models: learning rates x swept values x seeds."""
    return int(np.prod(self.shape))

  def _indices(self, axis: int) -> np.ndarray:
    """Each model's index along one of the unflattened axes, in flat order."""
    return seed_innermost(*self.shape)[axis]

  def lr_indices(self) -> np.ndarray:
    """Each model's learning-rate index, ``[models]`` int32 in flat order."""
    return self._indices(0)

  def value_indices(self) -> np.ndarray:
    """Each model's swept-value index, ``[models]`` int32 in flat order."""
    return self._indices(1)

  def seed_indices(self) -> np.ndarray:
    """Each model's seed index, which ``grid.model_keys`` turns into its key."""
    return self._indices(2)

  def hyperparameters(self) -> dict[str, np.ndarray]:
    """The grid engine's per-model hyper-parameters ``{"learning_rate", "l2", "dropout"}``,
    each ``[models]`` float32 in flat order."""
    hp = {"learning_rate": np.asarray(self.learning_rates, np.float32)[self.lr_indices()],
          "l2": np.full(self.num_models, self.l2, np.float32),
          "dropout": np.full(self.num_models, self.dropout, np.float32)}
    if self.swept_field:
      values = np.asarray(self.swept_values, np.float32)
      hp[HYPERPARAMETER_OF[self.swept_field]] = values[self.value_indices()]
    return hp

  def cells(self) -> Iterator[tuple[int, int]]:
    """Every ``(lr_index, value_index)``, in flat order."""
    return itertools.product(range(self.shape[0]), range(self.shape[1]))

  def rows(self, lr_index: int, value_index: int) -> np.ndarray:
    """The flat indices of one cell's models, one per seed.

    Args:
      lr_index: index into ``learning_rates``.
      value_index: index into ``swept_values`` (0 without a vmapped sweep).

    Returns:
      ``[num_seeds]`` int array, seed 0 first.
    """
    n_lr, n_values, n_seeds = self.shape
    if not (0 <= lr_index < n_lr and 0 <= value_index < n_values):
      raise IndexError(f"cell ({lr_index}, {value_index}) lies outside {n_lr} learning rates x "
                       f"{n_values} swept values")
    return (lr_index * n_values + value_index) * n_seeds + np.arange(n_seeds)

  def swept_params(self, value_index: int) -> dict[str, float]:
    """``{swept_field: value}`` of a cell, ``{}`` without a vmapped sweep.

    Args:
      value_index: index into ``swept_values``.

    Returns:
      A dict of at most one entry.
    """
    return {self.swept_field: self.swept_values[value_index]} if self.swept_field else {}

  def unflatten(self, curves: np.ndarray) -> np.ndarray:
    """``[evals, models]`` -> ``[evals, learning rates, swept values, seeds]``.

    Args:
      curves: ``[evals, num_models]``, in flat order.

    Returns:
      A reshaped view of ``curves``.

    Raises:
      ValueError: if ``curves`` is not ``[evals, num_models]``.
    """
    if curves.ndim != 2 or curves.shape[1] != self.num_models:
      raise ValueError(f"curves of shape {curves.shape}: expected [evals, {self.num_models}]")
    return curves.reshape((curves.shape[0],) + self.shape)

  def flatten(self, curves: np.ndarray) -> np.ndarray:
    """``[evals, learning rates, swept values, seeds]`` -> ``[evals, models]``.

    Args:
      curves: ``[evals, learning rates, swept values, seeds]``, as ``shape`` says.

    Returns:
      ``curves`` reshaped to ``[evals, num_models]``, in flat order.

    Raises:
      ValueError: if the axes after the first are not ``shape``.
    """
    if curves.shape[1:] != self.shape:
      raise ValueError(f"curves of shape {curves.shape}: expected [evals, *{self.shape}]")
    return curves.reshape(curves.shape[0], self.num_models)
