"""The grid engine: many models of one static configuration as ONE compiled program.

Training is a pure function of (rng, hyper-parameters): ``init(key, per_model) -> state`` and
``chunk(state, per_model) -> (state, metrics)``, both written for one model (a chunk is some
training steps and an evaluation) and mapped over a flattened leading "models" axis, sharded over
all devices: each device runs its share as a ``lax.map`` over vmaps of ``per_vmap`` models
(``over_models``). ``Grid.of`` compiles the programs of one model over that axis and ``run_grid``
trains them chunk by chunk, with ``resume``/``on_chunk`` hooks (``driver.RunHooks``). The engine
knows no task, model or kind of run: a sweep's programs are ``normattn_jax.sweep.programs``', a
fine-tuning's ``normattn_jax.finetune.train``'s.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from normattn_jax import _moved
from normattn_jax.train.state import TrainState
from normattn_jax.validation import check_int

Array = jax.Array
MODELS_AXIS, DATA_AXIS = "models", "data"


def own_slice(batch, shards: int):
  """This data shard's rows of a batch (every array split on its leading axis), inside a mesh
  with a ``DATA_AXIS`` of ``shards`` devices; the batch itself for 1."""
  if shards == 1:
    return batch
  index = jax.lax.axis_index(DATA_AXIS)

  def rows(x):
    size = x.shape[0] // shards
    return jax.lax.dynamic_slice_in_dim(x, index * size, size)
  return jax.tree.map(rows, batch)



def grid_mesh(data_shards: int = 1) -> Mesh:
  """Every device as a (models x data) mesh: ``data_shards`` devices split each model's batch,
  the rest of the factor lays out the models.

  Args:
    data_shards: the "data" axis' size; must divide the device count.

  Returns:
    A ``Mesh`` of axes ("models", "data").

  Raises:
    ValueError: naming the numbers, if ``data_shards`` does not divide the devices.
  """
  devices = jax.device_count()
  if data_shards < 1 or devices % data_shards:
    raise ValueError(f"config.train.data_shards={data_shards}: must divide the {devices} "
                     f"devices (a mesh of models x data)")
  return Mesh(np.asarray(jax.devices()).reshape(devices // data_shards, data_shards),
              (MODELS_AXIS, DATA_AXIS))


def data_shards_for(requested: int, num_models: int, batch_size: int, devices: int) -> int:
  """The "data" axis of a grid's mesh: ``requested``, or for 0 (auto) the fewest shards that
  leave no device without a model of its own: of the models axes (divisors of the devices)
  whose data axis divides ``batch_size``, the largest that is at most ``num_models``, else the
  smallest above it (3 models on 8 devices: 2 x 4; 300 models: 8 x 1; 3 models of batch 2:
  4 x 2).

  Args:
    requested: the config's ``train.data_shards`` (0: auto).
    num_models: the models of the grid.
    batch_size: each model's batch.
    devices: the devices to lay out.

  Returns:
    A divisor of ``devices``.
  """
  if requested:
    return requested
  axes = [m for m in range(1, devices + 1) if devices % m == 0 and batch_size % (devices // m) == 0]
  within = [m for m in axes if m <= num_models]
  return devices // (max(within) if within else min(axes))


def models_sharding(mesh: Optional[Mesh] = None) -> NamedSharding:
  """The sharding of a leading models axis over the "models" axis of ``mesh`` (default: every
  device on it), replicated over its "data" axis.

  Returns:
    A ``NamedSharding`` of ``PartitionSpec("models")``.
  """
  return NamedSharding(mesh or grid_mesh(), P(MODELS_AXIS))


# The share of an accelerator's memory that one program's vmap of models may fill (the rest:
# the states of the models not in the vmap, the data, XLA's own buffers).
MEMORY_FRACTION = 0.5


def models_per_vmap(requested: int, num_models: int,
                    bytes_per_model: Optional[Callable[[], int]] = None,
                    model_devices: Optional[int] = None) -> int:
  """How many models one vmap holds: ``requested``, or when it is 0 (auto) one on a CPU (the
  fastest there at the NAP paper's defaults, BENCHMARKS.md) and on an accelerator as many of
  each device's share as fit ``MEMORY_FRACTION`` of its memory (all of them when the device does
  not report its memory or no ``bytes_per_model`` is given). The one meaning of a
  ``models_per_vmap`` field of 0, in every config that has one (sweeps, fine-tuning, the
  majority run).

  Args:
    requested: the config's ``models_per_vmap``, e.g. a sweep's ``train.models_per_vmap``.
    num_models: the number of models of the grid.
    bytes_per_model: ``() -> bytes`` one model's program needs (``program_bytes``), called only
      on an accelerator with ``requested`` 0.
    model_devices: the devices the models are laid over (the mesh's "models" axis; default
      all).

  Returns:
    A positive integer.
  """
  if requested:
    return requested
  if jax.default_backend() == "cpu":
    return 1
  share = -(-num_models // (model_devices or jax.device_count()))
  stats = jax.devices()[0].memory_stats() or {}
  if bytes_per_model is None or "bytes_limit" not in stats:
    return share
  return width_within(share, bytes_per_model(), int(MEMORY_FRACTION * stats["bytes_limit"]))


def width_within(share: int, bytes_per_model: int, budget: int) -> int:
  """The widest vmap, at most ``share`` models and at least 1, whose models fit ``budget``.

  Args:
    share: the models one device runs.
    bytes_per_model: the memory one model's program needs.
    budget: the bytes the vmap may fill.

  Returns:
    An integer in ``[1, share]``.
  """
  return max(1, min(share, budget // max(bytes_per_model, 1)))


def program_bytes(fn: Callable, *args) -> int:
  """The memory a jitted ``fn(*args)`` needs, by XLA's analysis of the compiled program:
  arguments, outputs and temporaries (compiled, not run).

  Args:
    fn: a function of one model.
    *args: its arguments, arrays or ``jax.ShapeDtypeStruct``.

  Returns:
    Bytes.
  """
  memory = jax.jit(fn).lower(*args).compile().memory_analysis()
  return int(memory.argument_size_in_bytes + memory.output_size_in_bytes
             + memory.temp_size_in_bytes)


def model_bytes(init: Callable, chunk: Callable, per_model, shared: tuple = ()
                ) -> Callable[[], int]:
  """``models_per_vmap``'s ``bytes_per_model`` for the programs of one model: the memory of
  ``chunk`` on the state ``init`` makes (shapes only; compiled, not run).

  Args:
    init: ``(key data, per_model, *shared) -> state``.
    chunk: ``(state, per_model, *shared) -> (state, outputs)``.
    per_model: one model's per-model inputs, as ``jax.ShapeDtypeStruct`` objects.
    shared: the arrays every model reads.

  Returns:
    A function of no arguments that returns the bytes (called only when they are needed).
  """
  def measure() -> int:
    key = jax.random.key_data(jax.random.key(0))
    state = jax.eval_shape(init, key, per_model, *shared)
    return program_bytes(chunk, state, per_model, *shared)

  return measure


def measured_bytes(init: Callable, chunk: Callable, per_model, shared: tuple,
                   mesh: Mesh) -> Optional[Callable[[], int]]:
  """``models_per_vmap``'s ``bytes_per_model`` for a grid's programs, or None where one model
  cannot be measured alone: no ``per_model`` shapes, or a data-parallel mesh (a model split over
  its "data" axis is only built on that mesh).

  Args:
    init: ``(key data, per_model, *shared) -> state`` of one model.
    chunk: ``(state, per_model, *shared) -> (state, outputs)`` of one model.
    per_model: one model's per-model inputs, or None.
    shared: the arrays every model reads.
    mesh: the grid's mesh.

  Returns:
    ``model_bytes``' function, or None.
  """
  if per_model is None or mesh.shape[DATA_AXIS] > 1:
    return None
  return model_bytes(init, chunk, per_model, shared)


def padded_count(num_models: int, per_vmap: int, model_devices: Optional[int] = None) -> int:
  """The models axis rounded up so that every device holds whole vmaps.

  Args:
    num_models: the number of models.
    per_vmap: the models per vmap.
    model_devices: the devices the models are laid over (default: all).

  Returns:
    The smallest multiple of ``per_vmap * model_devices`` that is >= ``num_models``.
  """
  width = per_vmap * (model_devices or jax.device_count())
  return -(-num_models // width) * width


def pad_models(x: np.ndarray, count: int) -> np.ndarray:
  """Repeat the last model until the models axis has ``count`` entries.

  Args:
    x: an array with a leading models axis, at least one model.
    count: the length wanted, >= ``len(x)``.

  Returns:
    ``x`` with ``count`` entries on its leading axis (``x`` itself if it has them).
  """
  extra = count - len(x)
  return np.concatenate([x, np.repeat(x[-1:], extra, axis=0)]) if extra else x


def over_models(fn: Callable, per_vmap: int, mesh: Optional[Mesh] = None) -> Callable:
  """``fn(x, per_model, *shared)`` of one model -> the same over the models axis: ``shard_map``
  gives each device its share of ``x`` and ``per_model``, which it runs as a ``lax.map`` over
  vmaps of ``per_vmap`` models; ``shared`` reach every device whole. XLA compiles a model's
  arithmetic by the shapes it runs in, so fixing the vmap's width makes each model's numbers
  independent of how many other models, and which, share the program (a vmap over the whole
  axis would not). ``shard_map`` rather than a vmap over a device axis spares batching every
  operation once more for that axis: the same bits, built 7-15% faster (BENCHMARKS.md).

  Args:
    fn: a function of one model's ``x`` (a state or a key), its ``per_model`` inputs
      (hyper-parameters or settings) and the arrays every model reads.
    per_vmap: the models per vmap.
    mesh: the mesh the models axis is split over, on its "models" axis (``grid_mesh``; default:
      all devices on it); a "data" axis of it gets every model whole, for ``fn`` to split its
      batch over (``make_programs``).

  Returns:
    ``run(xs, per_models, *shared)``, ``xs`` and ``per_models`` with a leading models axis
    (``padded_count`` long), returning ``fn``'s outputs with that axis.
  """
  mesh = mesh or grid_mesh()

  def on_device(x, per_model, *shared):
    return jax.lax.map(lambda b: fn(*b, *shared), (x, per_model), batch_size=per_vmap)

  def run(x, per_model, *shared):
    specs = (P(MODELS_AXIS), P(MODELS_AXIS)) + (P(),) * len(shared)
    # check_vma=False: jax's Pallas kernels (the TPU flash attention of ``attention.fused``)
    # declare no varying mesh axes, which the check needs; nothing inside is differentiated
    # through a collective (data shards average their gradients by an explicit pmean), so the
    # check guards nothing here, and the compiled program is the same without it
    return jax.shard_map(on_device, mesh=mesh, in_specs=specs, out_specs=P(MODELS_AXIS),
                         check_vma=False)(x, per_model, *shared)
  return run


def replicated(mesh: Optional[Mesh] = None) -> NamedSharding:
  """The sharding of data every device holds whole (shared by all models).

  Returns:
    A ``NamedSharding`` of ``PartitionSpec()`` over ``mesh`` (default: ``grid_mesh()``).
  """
  return NamedSharding(mesh or grid_mesh(), P())


def models_program(fn: Callable, per_vmap: int, *, donate: bool = False,
                   mesh: Optional[Mesh] = None) -> Callable:
  """A jitted program over the models axis from ``fn(x, per_model, *shared)`` of one model:
  ``x`` (a state or a key) and ``per_model`` (its hyper-parameters or settings) are mapped with
  ``over_models``; ``shared`` (data every model reads) are arguments, not constants baked into
  the program, and reach every model whole.

  Args:
    fn: a function of one model.
    per_vmap: the models per vmap.
    donate: donate ``x``'s buffers (a state replaced by the result).
    mesh: the grid's mesh (``grid_mesh``; default: every device on the models axis).

  Returns:
    ``program(xs, per_models, *shared)``, its outputs sharded over the models axis.
  """
  mesh = mesh or grid_mesh()
  return jax.jit(over_models(fn, per_vmap, mesh), out_shardings=models_sharding(mesh),
                 donate_argnums=(0,) if donate else ())


@dataclasses.dataclass
class Grid:
  """The compiled, sharded programs of ``num_models`` models of one static configuration
  (padded to ``padded`` so that every device holds whole vmaps of ``per_vmap`` models): the
  engine under the sweeps, the majority experiment and any grid a user builds from the
  programs of one model (``Grid.of``)."""
  num_models: int
  per_vmap: int
  padded: int
  init: Callable           # jitted (key data [padded], per_model [padded]) -> states
  chunk_program: Callable  # jitted (states, per_model, *shared) -> (states, metrics)
  shared: tuple            # the data every model reads, on the devices
  mesh: Optional[Mesh] = None  # (models x data), grid_mesh; None: every device on models

  @property
  def sharding(self) -> NamedSharding:
    """The models axis' sharding: over the mesh's "models" axis, whole on its "data" axis."""
    return models_sharding(self.mesh)

  @classmethod
  def of(cls, init: Callable, chunk: Callable, num_models: int, per_vmap: int = 0,
         shared: tuple = (), mesh: Optional[Mesh] = None, *, per_model=None) -> "Grid":
    """The grid of the programs of one model, its vmap width the engine's own choice unless
    asked for: every caller's ``models_per_vmap`` field goes here as it is.

    Args:
      init: ``(key data, per_model, *shared) -> TrainState`` of one model (the shared arrays,
        e.g. pre-trained parameters, are there to start from).
      chunk: ``(state, per_model, *shared) -> (state, metrics)`` of one model: some training
        steps and an evaluation.
      num_models: the number of models before padding.
      per_vmap: the models per vmap asked for; 0 the auto width (``models_per_vmap``), from one
        model's memory when ``per_model`` is given.
      shared: arrays every model reads (e.g. a data set), replicated on every device.
      mesh: the (models x data) mesh (``grid_mesh``); None: every device on the models axis.
      per_model: one model's per-model inputs (``jax.ShapeDtypeStruct`` objects or arrays),
        to measure its memory (``model_bytes``) on an accelerator; None takes each device's
        share.

    Returns:
      The ``Grid``.

    Raises:
      ValueError: for a ``num_models`` that is not an integer >= 1 or a ``per_vmap`` that is
        not one >= 0, before anything is traced.
    """
    check_int("num_models", num_models)
    check_int("per_vmap", per_vmap, low=0)
    mesh = mesh or grid_mesh()
    model_devices = mesh.shape[MODELS_AXIS]
    width = models_per_vmap(per_vmap, num_models,
                            measured_bytes(init, chunk, per_model, shared, mesh), model_devices)
    return cls(num_models, width, padded_count(num_models, width, model_devices),
               models_program(init, width, mesh=mesh),
               models_program(chunk, width, donate=True, mesh=mesh),
               jax.device_put(tuple(shared), replicated(mesh)), mesh)

  def chunk(self, state: TrainState, per_model) -> tuple[TrainState, dict]:
    """One chunk of every model (``state`` is donated).

    Args:
      state: the models' states, sharded.
      per_model: the per-model inputs, sharded.

    Returns:
      ``(states, metrics)``, each with a leading ``[padded]`` axis.
    """
    return self.chunk_program(state, per_model, *self.shared)

  def program(self, fn: Callable) -> Callable:
    """Another function of one model over this grid, e.g. an evaluation.

    Args:
      fn: ``(state, per_model, *shared) -> outputs`` of one model.

    Returns:
      ``(states, per_model) -> outputs`` over the models axis.
    """
    compiled = models_program(fn, self.per_vmap, mesh=self.mesh)
    return lambda state, m: compiled(state, m, *self.shared)

  def shard(self, tree):
    """Pad the models axis of a host tree and place it on the devices.

    Args:
      tree: a tree of host arrays, each with a leading ``[num_models]`` axis.

    Returns:
      The tree with each leading axis padded to ``padded``, sharded over the devices.
    """
    return jax.device_put(jax.tree.map(lambda x: pad_models(x, self.padded), tree),
                          self.sharding)

  def metric_shapes(self, state: TrainState, per_model) -> dict:
    """The shapes and dtypes of one chunk's metrics (``{name: [padded models]}``), traced
    without running: a restore target for the metrics of a checkpoint.

    Args:
      state: the grid's ``TrainState`` (arrays or shapes) with a leading ``[padded]`` axis.
      per_model: the per-model inputs, name -> ``[padded]``.

    Returns:
      name -> ``jax.ShapeDtypeStruct``.
    """
    return jax.eval_shape(self.chunk, state, per_model)[1]


def model_keys(seed: int, seed_indices: np.ndarray) -> np.ndarray:
  """Raw key data per model: seed s gets the same initialisation and data at every learning rate
  (paired comparisons).

  Args:
    seed: the grid's seed (``config.seed``).
    seed_indices: the seed index of each model, ``[models]``.

  Returns:
    uint32 key data ``[models, key size]``.
  """
  base = jax.random.key(seed)
  return np.stack([np.asarray(jax.random.key_data(jax.random.fold_in(base, int(s))))
                   for s in seed_indices])


def to_host(x: jax.Array) -> np.ndarray:
  """The whole models axis as numpy, also when it is sharded over several hosts.

  Args:
    x: an array with a leading models axis, sharded over the devices.

  Returns:
    The whole array, on every process.
  """
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.asarray(x)


class GridRun(NamedTuple):
  """What ``train_grid`` returns: every evaluation of every model, and the final states."""
  metrics: dict   # name -> [evaluations, models]
  state: TrainState  # host arrays, each with a leading [models] axis



def _models_first(name: str, tree, num_models: int):
  """``tree``, each of whose arrays must lead with the models axis of ``num_models``."""
  for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
    shape = np.shape(leaf)
    if not shape or shape[0] != num_models:
      where = jax.tree_util.keystr(path)
      raise ValueError(f"run_grid: {name}{where} has shape {shape}: its leading axis must be "
                       f"the grid's {num_models} models")
  return tree


def run_grid(grid: Grid, keys: np.ndarray, per_model, num_chunks: int, *,
             resume: Optional[Callable] = None, on_chunk: Optional[Callable] = None,
             on_host: Optional[Callable] = None) -> GridRun:
  """Train any grid (``Grid.of``): init every model from its key, then run ``num_chunks``
  chunks, collecting each chunk's metrics on the host.

  Args:
    grid: the compiled programs.
    keys: per-model raw key data ``[models, key size]``.
    per_model: a tree of host arrays ``[models, ...]``, each model's own inputs (e.g. its
      hyper-parameters); or ``chunk index -> tree`` for inputs that change from chunk to chunk
      (e.g. the rows of a data set each model trains on), init getting chunk 0's.
    num_chunks: the chunks to run in all (a resumed run runs those left).
    resume: ``(grid, state, per_model) -> (chunks done, state, metrics so far)``, as in
      ``train_grid``; ``driver.RunHooks.resume`` restores, logs and budgets.
    on_chunk: ``(chunks done, state, metrics so far) -> None``, as in ``train_grid``;
      ``driver.RunHooks.on_chunk`` logs, checkpoints and budgets.
    on_host: ``{name: [models, ...]} -> {name: [models]}``, what a chunk's outputs become on
      the host before they are recorded (e.g. predictions scored into metrics); None keeps them.

  Returns:
    ``GridRun``: the metrics ``{name: [chunks, models]}`` (rows of chunks that a resume skipped
    as ``resume`` gave them) and the final states.

  Raises:
    ValueError: for keys or per-model inputs whose leading axis is not the grid's
      ``num_models`` (the padding would give the missing models other models' keys or
      nothing), or a ``num_chunks`` that is not an integer >= 0.
  """
  num_models = grid.num_models
  check_int("num_chunks", num_chunks, low=0)
  given = per_model if callable(per_model) else lambda index: per_model

  def inputs(index):
    return _models_first(f"per_model (chunk {index})", given(index), num_models)
  keys = _models_first("keys", np.asarray(keys), num_models)
  state = grid.init(grid.shard(keys), grid.shard(inputs(0)), *grid.shared)
  done, history = 0, {}
  if resume is not None:
    done, state, history = resume(grid, state, grid.shard(inputs(0)))
  for index in range(done, num_chunks):
    state, metrics = grid.chunk(state, grid.shard(inputs(index)))
    metrics = {name: to_host(value)[:num_models] for name, value in metrics.items()}
    if on_host is not None:
      metrics = on_host(metrics)
    for name, value in metrics.items():
      curve = history.setdefault(name, np.zeros((num_chunks,) + value.shape, value.dtype))
      curve[index] = value
    if on_chunk is not None:
      on_chunk(index + 1, state, history)
  return GridRun(history, jax.tree.map(lambda x: to_host(x)[:num_models], state))


def __getattr__(name: str):
  """The previous release's names of this module (``normattn_jax._moved``)."""
  return _moved.moved_attribute(__name__, name)
