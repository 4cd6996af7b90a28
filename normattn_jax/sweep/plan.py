"""The plan of a sweep: which grids it trains and how each is named and laid out, read from its
config once.

A sweep config says what to train in a few fields (``archs``, ``sweep.name``, ``sweep.grid``,
``learning_rates``, ``num_seeds``); ``SweepPlan.of`` turns them into what training, the stored
artifacts, the scoring, the figures and the seeds report all go by: the static points, one grid
per (static point, arch) with its name, the models axis and the pixel plots' columns. Each of
them takes the plan, so that none of them reads the sweep from the config again.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import ml_collections

from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.attention.section import attention_spec
from normattn_jax.sweep import config as config_lib
from normattn_jax.sweep.layout import ModelsAxis, grid_name

# A static point as the results key holds it: ((field, value), ...), () without a static sweep.
PointItems = tuple[tuple[str, Any], ...]


@dataclasses.dataclass(frozen=True)
class SweepGrid:
  """One grid of a sweep: an arch at a static point, trained as one program.

  Attributes:
    arch: the architecture's name.
    point: the static point as ``((field, value), ...)``; ``()`` without a static sweep.
    name: ``layout.grid_name``: its key prefix in ``metrics.npz``, its checkpoint folder and its
      TensorBoard tag.
  """
  arch: str
  point: PointItems
  name: str

  @property
  def values(self) -> dict:
    """The static point as a dict, field -> value (``{}`` without a static sweep)."""
    return dict(self.point)

  @property
  def key(self) -> tuple[str, PointItems]:
    """``(arch, point)``: the grid's key in a sweep's results."""
    return self.arch, self.point


def training_work(config: ml_collections.ConfigDict) -> int:
  """A grid's training work in proportion, to order grids by without compiling them: steps x
  batch x tokens x layers x width x (width + tokens), the sizes of the dense layers' and the
  attention's products; the same for every arch."""
  c = config
  return (c.train.num_steps * c.train.batch_size * c.task.seq_len * c.model.num_layers
          * c.model.d_model * (c.model.d_model + c.task.seq_len))


@dataclasses.dataclass(frozen=True)
class SweepPlan:
  """Everything a sweep's config decides about its grids, computed once (``of``).

  Attributes:
    config: the sweep config the plan was made from.
    archs: the architectures, in the config's order.
    points: the static points (``config.static_points``), ``((),)`` without a static sweep.
    grids: one per (static point, arch), points outer: the order they are stored in
      ``metrics.npz`` and scored in (they train in ``training_order``).
    axis: the models axis of every grid (learning rates x vmapped swept value x seeds).
    swept_field: ``sweep.name``, vmapped or static; ``""`` without a sweep.
    swept_values: ``sweep.grid`` as floats, ``()`` without a sweep.
  """
  config: ml_collections.ConfigDict
  archs: tuple[str, ...]
  points: tuple[PointItems, ...]
  grids: tuple[SweepGrid, ...]
  axis: ModelsAxis
  swept_field: str
  swept_values: tuple[float, ...]

  @classmethod
  def of(cls, config: ml_collections.ConfigDict) -> SweepPlan:
    """The plan of a sweep config.

    Args:
      config: a validated sweep config (``run_sweep`` validates one; a stored ``config.json``,
        read with ``artifacts.read_config``, was validated when its run started).

    Returns:
      The config's ``SweepPlan``.
    """
    archs = tuple(config.archs)
    points = tuple(tuple(point.items()) for point in config_lib.static_points(config))
    grids = tuple(SweepGrid(arch, point, grid_name(arch, dict(point)))
                  for point in points for arch in archs)
    return cls(config=config, archs=archs, points=points, grids=grids,
               axis=ModelsAxis.of(config), swept_field=config.sweep.name,
               swept_values=tuple(float(v) for v in config.sweep.grid))

  @property
  def static(self) -> bool:
    """Whether each swept value is a program of its own (a static sweep)."""
    return self.points != ((),)

  @functools.cached_property
  def point_configs(self) -> dict[PointItems, ml_collections.ConfigDict]:
    """Each static point's own config (``config.point_config``: its value applied, its steps
    scaled), made when first asked for."""
    return {point: config_lib.point_config(self.config, dict(point)) for point in self.points}

  @functools.cached_property
  def attention(self) -> dict[PointItems, Optional[AttentionSpec]]:
    """Each static point's normalisation (its ``attention`` section as a spec, None for the
    archs' own), made once from the validated config: the grids' ``programs.Setup`` carry it."""
    return {point: attention_spec(self.point_config(point).attention, "attention", keep=True)
            for point in self.points}

  def point_config(self, point: PointItems = ()) -> ml_collections.ConfigDict:
    """The config that the grids at ``point`` train with.

    Raises:
      ValueError: naming the sweep's points, for a point it does not hold.
    """
    if point not in self.point_configs:
      raise ValueError(f"point={point!r}: the sweep's static points are {self.points}")
    return self.point_configs[point]

  @functools.cached_property
  def training_order(self) -> tuple[SweepGrid, ...]:
    """The grids in the order they train: the most work first (``training_work``), the plan's
    order where it ties. While the long grids train, the short ones compile in the background
    (``sweep.train``), so a grid that trains for less than a compile does not leave the devices
    waiting for the next one's."""
    work = {point: training_work(self.point_config(point)) for point in self.points}
    return tuple(sorted(self.grids, key=lambda grid: -work[grid.point]))

  def hyperparameters(self, point: PointItems = ()) -> dict:
    """The grid engine's per-model hyper-parameters of the grids at ``point``
    (``ModelsAxis.hyperparameters`` of the point's config): the point's own values, e.g. its
    dropout rate where a dropout sweep is a program per rate (``sweep.in_program`` False)."""
    return ModelsAxis.of(self.point_config(point)).hyperparameters()

  def grid(self, arch: str, point: PointItems = ()) -> SweepGrid:
    """The grid of ``arch`` at ``point``.

    Raises:
      ValueError: naming the sweep's archs or points, for a grid it does not train.
    """
    if arch not in self.archs:
      raise ValueError(f"arch={arch!r}: the sweep trained {self.archs}")
    found = next((g for g in self.grids if g.key == (arch, point)), None)
    if found is None:
      raise ValueError(f"point={point!r}: the sweep's static points are {self.points}")
    return found

  def grids_of(self, arch: str) -> tuple[SweepGrid, ...]:
    """``arch``'s grid at every static point, in order.

    Raises:
      ValueError: naming the sweep's archs, if ``arch`` is not one of them.
    """
    if arch not in self.archs:
      raise ValueError(f"arch {arch!r} is not one of the run's archs {self.archs}")
    return tuple(g for g in self.grids if g.arch == arch)

  def locate(self, value_index: Optional[int]) -> tuple[PointItems, int]:
    """Where the swept value ``sweep.grid[value_index]`` lies: its static point and its index
    along the models axis' swept values.

    Args:
      value_index: an index into ``swept_values``; None without a sweep.

    Returns:
      ``(point, index)``: a static sweep's value is a point of its own (index 0 of the models
      axis); a vmapped sweep's is the models axis' ``value_index`` at the one point ``()``.
    """
    if value_index is None:
      return (), 0
    if self.static:
      return self.points[value_index], 0
    return (), value_index

  @property
  def total_model_steps(self) -> int:
    """Training steps of every model of every grid: the sweep's progress in model-steps."""
    return (sum(self.point_config(g.point).train.num_steps for g in self.grids)
            * self.axis.num_models)
