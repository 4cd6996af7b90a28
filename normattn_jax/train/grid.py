"""The grid engine: many models of one static configuration as ONE compiled program.

Training is a pure function of (rng, hyper-parameters): ``init(key, per_model) -> state`` and
``chunk(state, per_model) -> (state, metrics)``, both written for one model (a chunk is some
training steps and an evaluation) and mapped over a flattened leading "models" axis, sharded over
all devices: each device runs its share as a ``lax.map`` over vmaps of ``per_vmap`` models
(``over_models``). ``Grid.of`` compiles the programs of one model over that axis, once each and
ahead of their first call, and ``run_grid`` trains them chunk by chunk, the next chunk dispatched
before the host reads a chunk's metrics where no hook needs its state, with
``resume``/``on_chunk`` hooks (``driver.RunHooks``). The engine
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
from normattn_jax.train.timing import CompileCounts, counting
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
                    model_devices: Optional[int] = None) -> int:
  """How many models one vmap holds: ``requested``, or when it is 0 (auto) one on a CPU (the
  fastest there at the NAP paper's defaults, BENCHMARKS.md) and on an accelerator each device's
  whole share, which ``Grid.of`` narrows where XLA's memory analysis of that very program finds
  more than ``MEMORY_FRACTION`` of the device's memory (``fitted_width``). The one meaning of a
  ``models_per_vmap`` field of 0, in every config that has one (sweeps, fine-tuning, the
  majority run).

  Args:
    requested: the config's ``models_per_vmap``, e.g. a sweep's ``train.models_per_vmap``.
    num_models: the number of models of the grid.
    model_devices: the devices the models are laid over (the mesh's "models" axis; default
      all).

  Returns:
    A positive integer: the width to compile first.
  """
  if requested:
    return requested
  if jax.default_backend() == "cpu":
    return 1
  return -(-num_models // (model_devices or jax.device_count()))


def memory_budget() -> Optional[int]:
  """The bytes one program's vmaps of models may fill: ``MEMORY_FRACTION`` of an accelerator's
  memory; None on a CPU (whose width is 1) or a device that does not report its memory.

  Returns:
    Bytes, or None.
  """
  if jax.default_backend() == "cpu":
    return None
  stats = jax.devices()[0].memory_stats() or {}
  return int(MEMORY_FRACTION * stats["bytes_limit"]) if "bytes_limit" in stats else None


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


def fitted_width(width: int, needed: int, budget: int) -> int:
  """The width of a program compiled ``width`` models wide that needs ``needed`` bytes, fitted
  to ``budget``: ``width`` itself when it fits, else the widest whose models, each needing its
  share of ``needed``, do (``width_within``).

  Args:
    width: the models per vmap the program was compiled with.
    needed: the bytes it needs (``executable_bytes``).
    budget: the bytes it may fill (``memory_budget``).

  Returns:
    An integer in ``[1, width]``.
  """
  if needed <= budget:
    return width
  return width_within(width, -(-needed // width), budget)


def executable_bytes(compiled) -> Optional[int]:
  """The memory a compiled program needs by XLA's analysis: arguments, outputs (less those that
  reuse donated arguments' buffers) and temporaries; None where the backend gives no analysis.

  Args:
    compiled: a ``jax.stages.Compiled``.

  Returns:
    Bytes, or None.
  """
  memory = compiled.memory_analysis()
  if memory is None:
    return None
  return int(memory.argument_size_in_bytes + memory.output_size_in_bytes
             - memory.alias_size_in_bytes + memory.temp_size_in_bytes)


def program_bytes(fn: Callable, *args) -> int:
  """The memory a jitted ``fn(*args)`` needs, by XLA's analysis of the compiled program
  (``executable_bytes``; compiled, not run).

  Args:
    fn: a function.
    *args: its arguments, arrays or ``jax.ShapeDtypeStruct``.

  Returns:
    Bytes.
  """
  return executable_bytes(jax.jit(fn).lower(*args).compile())


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
  # the program is named after the function of one model (XLA's compile logs, ``timing``)
  run.__name__ = run.__qualname__ = getattr(fn, "__name__", run.__name__)
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


class GridExecutables(NamedTuple):
  """A grid's programs compiled ahead of their first call (``compile_programs``)."""
  init: Callable   # (key data [padded], per_model [padded], *shared) -> states
  chunk: Callable  # (states, per_model, *shared) -> (states, metrics), states donated


def key_data_shape() -> jax.ShapeDtypeStruct:
  """The shape and dtype of one model's raw key data (``model_keys``' rows), traced, not run."""
  return jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0)))


def compile_programs(init_program: Callable, chunk_program: Callable, padded: int, per_model,
                     shared: tuple, mesh: Mesh) -> GridExecutables:
  """Lower and compile a grid's jitted init and chunk (``models_program``) from shapes alone,
  for arguments laid out as the grid lays them (the models axis ``padded`` long, sharded over
  the mesh's "models" axis; ``shared`` as they are): the executables the grid calls, so that
  nothing compiles at the first call, and a grid can be compiled in one thread while another
  trains.

  Args:
    init_program: the jitted ``(key data, per_model, *shared) -> states``.
    chunk_program: the jitted ``(states, per_model, *shared) -> (states, metrics)``.
    padded: the models axis' length.
    per_model: one model's per-model inputs (``jax.ShapeDtypeStruct`` objects or arrays).
    shared: the arrays every model reads, on the devices.
    mesh: the grid's mesh.

  Returns:
    ``GridExecutables``.
  """
  sharding = models_sharding(mesh)

  def over_models_axis(x):
    return jax.ShapeDtypeStruct((padded,) + tuple(np.shape(x)), x.dtype, sharding=sharding)
  keys = over_models_axis(key_data_shape())
  inputs = jax.tree.map(over_models_axis, per_model)
  init = init_program.lower(keys, inputs, *shared).compile()
  states = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding,
                                                       weak_type=x.weak_type),
                        jax.eval_shape(init_program, keys, inputs, *shared))
  return GridExecutables(init, chunk_program.lower(states, inputs, *shared).compile())


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
  # init and chunk compiled ahead (``Grid.of`` given ``per_model``), which ``start`` and
  # ``chunk`` call; None: the jitted programs, compiled at their first call
  compiled: Optional[GridExecutables] = None
  compiles: CompileCounts = dataclasses.field(default_factory=CompileCounts)  # Grid.of's

  @property
  def sharding(self) -> NamedSharding:
    """The models axis' sharding: over the mesh's "models" axis, whole on its "data" axis."""
    return models_sharding(self.mesh)

  @classmethod
  def of(cls, init: Callable, chunk: Callable, num_models: int, per_vmap: int = 0,
         shared: tuple = (), mesh: Optional[Mesh] = None, *, per_model=None,
         ahead: bool = True) -> "Grid":
    """The grid of the programs of one model, its vmap width the engine's own choice unless
    asked for: every caller's ``models_per_vmap`` field goes here as it is. Given
    ``per_model``, its init and chunk are compiled here, once each (``compile_programs``); on an
    accelerator with the auto width, the chunk at each device's whole share, and only if XLA's
    memory analysis of it exceeds ``MEMORY_FRACTION`` of the device's memory once more at the
    width that analysis allows (``fitted_width``, said in a line).

    Args:
      init: ``(key data, per_model, *shared) -> TrainState`` of one model (the shared arrays,
        e.g. pre-trained parameters, are there to start from).
      chunk: ``(state, per_model, *shared) -> (state, metrics)`` of one model: some training
        steps and an evaluation.
      num_models: the number of models before padding.
      per_vmap: the models per vmap asked for; 0 the auto width (``models_per_vmap``).
      shared: arrays every model reads (e.g. a data set), replicated on every device.
      mesh: the (models x data) mesh (``grid_mesh``); None: every device on the models axis.
      per_model: one model's per-model inputs (``jax.ShapeDtypeStruct`` objects or arrays),
        to compile the programs ahead; None leaves them to compile at their first call (and
        takes each device's whole share on an accelerator).
      ahead: compile here (given ``per_model``); False leaves the jitted programs alone, e.g.
        to export them for another platform than this machine's.

    Returns:
      The ``Grid``.

    Raises:
      ValueError: for a ``num_models`` that is not an integer >= 1 or a ``per_vmap`` that is
        not one >= 0, before anything is traced.
    """
    check_int("num_models", num_models)
    check_int("per_vmap", per_vmap, low=0)
    mesh = mesh or grid_mesh()
    shared = jax.device_put(tuple(shared), replicated(mesh))
    width = models_per_vmap(per_vmap, num_models, mesh.shape[MODELS_AXIS])
    per_model = per_model if ahead else None
    with counting() as compiles:
      grid = cls.at_width(init, chunk, num_models, width, shared, mesh, per_model)
      budget = memory_budget() if not per_vmap and grid.compiled is not None else None
      needed = None if budget is None else executable_bytes(grid.compiled.chunk)
      narrower = width if needed is None else fitted_width(width, needed, budget)
      if narrower < width:
        if jax.process_index() == 0:
          print(f"grid of {num_models} models: {width} per vmap need {needed / 2**30:.2f} GiB "
                f"of {budget / 2**30:.2f} GiB ({MEMORY_FRACTION:.0%} of the device's memory): "
                f"compiling again at {narrower} per vmap", flush=True)
        grid = cls.at_width(init, chunk, num_models, narrower, shared, mesh, per_model)
    grid.compiles = compiles
    return grid

  @classmethod
  def at_width(cls, init: Callable, chunk: Callable, num_models: int, width: int,
               shared: tuple, mesh: Mesh, per_model=None) -> "Grid":
    """``Grid.of`` at a width given (``shared`` already on the devices), compiled ahead when
    ``per_model`` is given."""
    padded = padded_count(num_models, width, mesh.shape[MODELS_AXIS])
    init_program = models_program(init, width, mesh=mesh)
    chunk_program = models_program(chunk, width, donate=True, mesh=mesh)
    compiled = (None if per_model is None else
                compile_programs(init_program, chunk_program, padded, per_model, shared, mesh))
    return cls(num_models, width, padded, init_program, chunk_program, shared, mesh, compiled)

  def start(self, keys, per_model) -> TrainState:
    """Every model's first state (its ``init``).

    Args:
      keys: the models' raw key data, sharded (``shard``).
      per_model: the per-model inputs, sharded.

    Returns:
      The states, each with a leading ``[padded]`` axis.
    """
    program = self.init if self.compiled is None else self.compiled.init
    return program(keys, per_model, *self.shared)

  def chunk(self, state: TrainState, per_model) -> tuple[TrainState, dict]:
    """One chunk of every model (``state`` is donated).

    Args:
      state: the models' states, sharded.
      per_model: the per-model inputs, sharded.

    Returns:
      ``(states, metrics)``, each with a leading ``[padded]`` axis.
    """
    program = self.chunk_program if self.compiled is None else self.compiled.chunk
    return program(state, per_model, *self.shared)

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
    return jax.eval_shape(self.chunk_program, state, per_model, *self.shared)[1]


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
             on_host: Optional[Callable] = None,
             state_needed: Optional[Callable[[int], bool]] = None) -> GridRun:
  """Train any grid (``Grid.of``): init every model from its key, then run ``num_chunks``
  chunks, collecting each chunk's metrics on the host. Where ``state_needed`` says that the
  state after a chunk is not needed, the next chunk is dispatched before that chunk's metrics
  are read, so that the devices do not wait for the host between them.

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
    state_needed: ``chunks done -> bool``, asked before that chunk's metrics are read: whether
      ``on_chunk`` reads the state after it (to checkpoint it); where not, the next chunk is
      dispatched first, the state donated to it, and ``on_chunk`` gets None for the state.
      ``driver.RunHooks.state_needed`` says so where no checkpoint is due and the budget does not
      stop. None: always needed (each chunk dispatched after the previous one's ``on_chunk``).
      The numbers are the same either way.

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
  state = grid.start(grid.shard(keys), grid.shard(inputs(0)))
  done, history = 0, {}
  if resume is not None:
    done, state, history = resume(grid, state, grid.shard(inputs(0)))

  def record(index, outputs):
    metrics = {name: to_host(value)[:num_models] for name, value in outputs.items()}
    if on_host is not None:
      metrics = on_host(metrics)
    for name, value in metrics.items():
      curve = history.setdefault(name, np.zeros((num_chunks,) + value.shape, value.dtype))
      curve[index] = value

  running = grid.chunk(state, grid.shard(inputs(done))) if done < num_chunks else None
  for index in range(done, num_chunks):
    state, outputs = running
    chunks_done = index + 1
    ahead = (chunks_done < num_chunks and state_needed is not None
             and not state_needed(chunks_done))
    if ahead:  # the devices run the next chunk while the host reads this one's metrics
      running = grid.chunk(state, grid.shard(inputs(chunks_done)))
    record(index, outputs)
    if on_chunk is not None:
      on_chunk(chunks_done, None if ahead else state, history)
    if not ahead and chunks_done < num_chunks:
      running = grid.chunk(state, grid.shard(inputs(chunks_done)))
  return GridRun(history, jax.tree.map(lambda x: to_host(x)[:num_models], state))


def __getattr__(name: str):
  """The previous release's names of this module (``normattn_jax._moved``)."""
  return _moved.moved_attribute(__name__, name)
