"""A sweep's programs: the static part of a grid (``Setup``: one architecture at one point of the
shape sweeps), the training and evaluation functions of one of its models (``make_programs``),
the grid they compile to on the engine (``build_grid``) and the training of it (``train_grid``).

Data are generated on device inside the step, a fresh batch every step; the task is the
registered one (``normattn_jax.tasks``) that the config names. Each model's learning rate, L2
weight and dropout rate are data (``HYPERPARAMETERS``), so one compilation serves every cell;
a program without dropout (``train.dropout`` 0 and not swept) draws no masks; with
``train.drop_zero_l2``, where every model's L2 weight is 0 (``train.l2`` 0 and not swept), the
program has no L2 term at all (``traces_l2``).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from normattn_jax import tasks
from normattn_jax.attention.module_spec import AttentionModuleSpec
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.attention.section import attention_spec
from normattn_jax.models.sequence import SequenceModel
from normattn_jax.precision import DTYPES
from normattn_jax.sweep import config as config_lib
from normattn_jax.sweep.layout import ModelsAxis
from normattn_jax.train.grid import (DATA_AXIS, Grid, GridRun, data_shards_for, grid_mesh,
                                     model_keys, own_slice, run_grid)
from normattn_jax.train.optim import make_optimizer, with_learning_rate
from normattn_jax.train.state import EVAL_STREAM, TRAIN_STREAM, TrainState

Array = jax.Array
# The per-model hyper-parameters of a sweep's grid.
HYPERPARAMETERS = ("learning_rate", "l2", "dropout")
# Grids compiled at once in a sweep's background (``sweep.train.train_grids``): None is one where
# the devices are the host's CPU cores (a second compile takes cores from the training) and
# ``ACCELERATOR_COMPILE_THREADS`` beside an accelerator, whose host is idle while it trains (where
# a sweep's compiles outlast its training, their number over the threads is its floor).
COMPILE_THREADS: Optional[int] = None
ACCELERATOR_COMPILE_THREADS = 2


def _own(value: Optional[bool], default: bool) -> bool:
  """A config switch: None leaves the arch's (or the task's) own choice."""
  return default if value is None else bool(value)


# ``Setup.attention``'s default: the spec that the config's attention section names.
FROM_CONFIG = "from the config"


@dataclasses.dataclass(frozen=True)
class Setup:
  """The static part of a grid: one architecture at one point of the shape sweeps.

  Attributes:
    arch: the architecture.
    config: the (point) config.
    attention: the normalisation the arch's attention is swapped to (None: the arch's own), as
      the sweep's plan made it once from the config (``plan.SweepPlan.attention``); by default
      read from ``config.attention`` here.
  """
  arch: str
  config: ml_collections.ConfigDict
  attention: Union[AttentionSpec, None, str] = FROM_CONFIG

  @property
  def spec(self) -> Optional[AttentionSpec]:
    """The normalisation of the model's attention (None: the arch's own)."""
    if self.attention is FROM_CONFIG:
      return attention_spec(self.config.attention, "attention", keep=True)
    return self.attention

  @property
  def task(self) -> tasks.Task:
    """The registered task that ``config.task.name`` names."""
    return tasks.get(self.config.task.name)

  @property
  def settings(self) -> ml_collections.ConfigDict:
    """The config's ``task`` section, which the task's functions take: each setting the task
    owns at its default where the config leaves it out."""
    return tasks.resolved_settings(self.task, self.config.task)

  @property
  def val_len(self) -> int:
    """The validation sequence length: the task's ``validation_length`` of ``seq_len``."""
    return self.task.validation_length(self.settings.seq_len)

  @property
  def positional(self) -> bool:
    """``model.positional``, or when it is None the task's own choice."""
    return _own(self.config.model.positional, self.task.positional)

  @property
  def warmup_steps(self) -> int:
    """Warm-up steps: 10% of ``train.num_steps`` if warm-up is on (BERT's default), else 0."""
    warm = _own(self.config.train.warmup, self.arch == "bert")
    return self.config.train.num_steps // 10 if warm else 0

  @property
  def clip_norm(self):
    """The per-tensor gradient clipping norm: 1.0 if clipping is on (BERT's default), else None."""
    return 1.0 if _own(self.config.train.clip, self.arch == "bert") else None

  def model(self) -> SequenceModel:
    """The ``SequenceModel`` of this arch and config (``max_len`` covers the validation length).

    Returns:
      The unbound flax module.
    """
    c, task = self.config, self.task
    return SequenceModel(
        vocab_size=self.settings.vocab_size,
        max_len=max(self.settings.seq_len, self.val_len), d_model=c.model.d_model,
        num_layers=c.model.num_layers, num_heads=c.model.num_heads, arch=self.arch,
        normalization=self.spec,
        normalize=c.model.normalize,
        attention_gelu=c.model.attention_gelu, output=self.settings.output,
        num_classes=None if task.num_classes is None else task.num_classes(self.settings),
        positional=self.positional, dropout_rate=c.train.dropout,
        attention_module=AttentionModuleSpec.from_config(c.model),
        dtype=DTYPES[config_lib.compute_dtype(c)], ffn_implementation=c.model.ffn_implementation)

  def sample(self, key: Array, batch_size: int, seq_len: int):
    """(inputs, labels) for one batch of the task.

    Args:
      key: a PRNG key.
      batch_size: the number of sequences.
      seq_len: the tokens per sequence.

    Returns:
      ``(inputs, labels)``: int32 ``[batch_size, seq_len]`` and the task's labels.
    """
    return self.task.sample(key, batch_size, seq_len, self.settings)


def l2_penalty(params) -> Array:
  """Sum of squared kernels (Keras' kernel regulariser: no biases, gains or embeddings).

  Args:
    params: a flax params tree.

  Returns:
    The scalar sum of the squares of every leaf named ``kernel``.
  """
  leaves = jax.tree_util.tree_leaves_with_path(params)
  return sum(jnp.sum(jnp.square(x)) for path, x in leaves
             if getattr(path[-1], "key", None) == "kernel")


def traces_l2(config: ml_collections.ConfigDict) -> bool:
  """Whether a grid's program computes the L2 term (its weight ``hp["l2"]`` per model): always,
  unless ``train.drop_zero_l2`` leaves it out where ``train.l2`` is 0 and not swept (every
  model's weight 0; ``loss + 0 * penalty`` is ``loss`` for finite parameters, though XLA's
  optimised compile may round the two programs apart)."""
  return (not config.train.drop_zero_l2 or config.train.l2 != 0
          or config.sweep.name == "train.l2")


def traces_dropout(config: ml_collections.ConfigDict) -> bool:
  """Whether a grid's program draws dropout masks, at each model's rate ``hp["dropout"]``:
  where ``train.dropout`` is above 0 or swept inside the program; else it is deterministic."""
  return (config.train.dropout != 0
          or (config.sweep.name == "train.dropout" and config_lib.swept_in_program(config)))


class Programs(NamedTuple):
  """The pure functions of ONE model; the caller vmaps and jits them."""
  init: Callable        # (key_data, hp) -> TrainState
  train_step: Callable  # (state, hp) -> (state, (loss, accuracy))
  chunk: Callable       # (state, hp, eval_sets) -> (state, metrics): eval_every steps + evaluation
  evaluate: Callable    # (state, eval_sets) -> (metrics, finite): the chunk's evaluation alone


def make_programs(setup: Setup, data_shards: Optional[int] = None) -> Programs:
  """The training and evaluation functions of one model of ``setup``. With
  ``train.data_shards`` > 1 they run inside ``over_models``' mesh, whose "data" axis splits each
  model's batch: every shard draws the whole batch from the model's key, trains on its slice and
  the shards average their gradients and metrics (``lax.pmean``), so a model's numbers are its
  one-device numbers up to the order of a sum (dropout masks are drawn per slice).

  Args:
    setup: the arch and config of the grid.
    data_shards: the mesh's "data" axis (``data_shards_for``); None: the config's, 0 as 1.

  Returns:
    ``Programs(init, train_step, chunk, evaluate)``, each for one model.
  """
  c = setup.config
  shards = data_shards or c.train.data_shards or 1
  model = setup.model()
  batch_size = c.train.batch_size
  n = setup.settings.seq_len
  deterministic = not traces_dropout(c)
  grouped = setup.task.grouped_eval
  tx = make_optimizer(c.train.num_steps, setup.warmup_steps, setup.clip_norm,
                      flat=c.train.flat_adam)
  with_l2 = traces_l2(c)

  def init(key: Array, hp: dict) -> TrainState:
    key = jax.random.wrap_key_data(key)
    params = model.init(key, jnp.zeros((1, n), jnp.int32))
    state = TrainState.create(apply_fn=model.apply, params=params, tx=tx,
                              key=jax.random.fold_in(key, 1))
    return state.replace(opt_state=with_learning_rate(state.opt_state, hp["learning_rate"]))

  def loss_fn(params, inputs, labels, hp, dropout_key):
    dropped = model if deterministic else model.clone(dropout_rate=hp["dropout"])
    logits = dropped.apply(params, inputs, deterministic=deterministic,
                           rngs=None if deterministic else {"dropout": dropout_key})
    logits = logits.astype(jnp.float32)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    acc = jnp.mean(jnp.argmax(logits, -1) == labels)
    objective = loss + hp["l2"] * l2_penalty(params) if with_l2 else loss
    return objective, (loss, acc)

  def train_step(state: TrainState, hp: dict):
    data_key, dropout_key = jax.random.split(state.step_key(TRAIN_STREAM))
    inputs, labels = own_slice(setup.sample(data_key, batch_size, n), shards)
    grads, (loss, acc) = jax.grad(loss_fn, has_aux=True)(state.params, inputs, labels, hp,
                                                          dropout_key)
    if shards > 1:
      grads, loss, acc = jax.lax.pmean((grads, loss, acc), DATA_AXIS)
    return state.apply_gradients(grads=grads, loss=loss), (loss, acc)

  def accuracy(params, inputs, labels):
    """The batch's accuracy and whether its logits were finite (argmax(NaN) is no score)."""
    logits = model.apply(params, inputs)
    return jnp.mean(jnp.argmax(logits, -1) == labels), jnp.isfinite(logits).all()

  def evaluate(state: TrainState, eval_sets) -> tuple[dict, Array]:
    keys = jax.random.split(state.step_key(EVAL_STREAM), c.eval.val_batches)
    val, finite = jax.lax.map(lambda k: accuracy(state.params, *setup.sample(k, batch_size,
                                                                             setup.val_len)), keys)
    metrics, finite = {"val_acc": jnp.mean(val)}, finite.all()
    for validation, eval_set in zip((False, True), eval_sets):
      inputs, labels = eval_set  # [groups, chunks, chunk_size, (length)]
      flat = (inputs.reshape((-1,) + inputs.shape[2:]), labels.reshape((-1,) + labels.shape[2:]))
      per_chunk, chunk_finite = jax.lax.map(lambda batch: accuracy(state.params, *batch), flat)
      finite &= chunk_finite.all()
      metrics.update(zip(grouped.metric_names(validation),
                         jnp.mean(per_chunk.reshape(labels.shape[:2]), axis=-1)))
    return metrics, finite

  def chunk(state: TrainState, hp: dict, eval_sets) -> tuple[TrainState, dict]:
    state, (loss, acc) = jax.lax.scan(lambda s, _: train_step(s, hp), state, None,
                                      length=c.train.eval_every)
    evaluated, finite = evaluate(state, eval_sets)
    # parameters that blew up in the chunk's last step: the loss was finite, the logits are not
    state = state.replace(diverged=state.diverged | ~finite)
    metrics = {"train_loss": jnp.mean(loss), "train_acc": jnp.mean(acc), **evaluated}
    metrics["diverged"] = state.diverged
    # a diverged model has failed: its accuracies are 0, not whatever argmax(NaN) hits
    return state, {k: (v if k in ("diverged", "train_loss") else jnp.where(state.diverged, 0.0, v))
                   for k, v in metrics.items()}

  return Programs(init, train_step, chunk, evaluate)


def eval_sets_for(setup: Setup, seed: int, chunk_size: int = 250):
  """The task's grouped evaluation sets (``Task.grouped_eval``) at N and, with
  ``eval.validation_case_sets``, at the validation length, shared by every model, each shaped
  ``[groups, chunks, chunk_size, ...]`` for a memory-bounded ``lax.map``; empty for a task
  without them.

  Args:
    setup: the arch and config of the grid.
    seed: the seed the sets are drawn from (``config.seed``).
    chunk_size: the most examples per chunk; lowered until it divides ``eval.case_set_size``.

  Returns:
    ``((inputs, labels) at N, (inputs, labels) at the validation length)`` (the latter only
    with ``eval.validation_case_sets``), or ().
  """
  grouped = setup.task.grouped_eval
  if grouped is None:
    return ()
  per_group = setup.config.eval.case_set_size
  chunk_size = min(chunk_size, per_group)
  while per_group % chunk_size:
    chunk_size -= 1
  sets = []
  lengths = (setup.settings.seq_len, setup.val_len)
  for i, length in enumerate(lengths[:2 if setup.config.eval.validation_case_sets else 1]):
    key = jax.random.fold_in(jax.random.key(seed), 1000 + i)
    inputs, labels = grouped.sample(key, per_group, length, setup.settings)
    shape = (len(grouped.groups), per_group // chunk_size, chunk_size)
    sets.append((inputs.reshape(shape + inputs.shape[1:]),
                 labels.reshape(shape + labels.shape[1:])))
  return tuple(sets)


def compile_threads(backend: Optional[str] = None) -> int:
  """The grids a sweep compiles at once (``COMPILE_THREADS``) on ``backend`` (default JAX's).

  Raises:
    ValueError: if ``COMPILE_THREADS`` is set below 1.
  """
  if COMPILE_THREADS is not None:
    if not (isinstance(COMPILE_THREADS, int) and COMPILE_THREADS >= 1):
      raise ValueError(f"COMPILE_THREADS must be None or an int >= 1, got {COMPILE_THREADS!r}")
    return COMPILE_THREADS
  return 1 if (backend or jax.default_backend()) == "cpu" else ACCELERATOR_COMPILE_THREADS


def build_grid(setup: Setup, num_models: int, *, ahead: bool = True) -> Grid:
  """The grid of a sweep's ``setup`` (``make_programs``) for ``num_models`` models, the
  task's grouped evaluation sets shared, its programs compiled here (``Grid.of``).

  Args:
    setup: the arch and config of the grid.
    num_models: the number of models before padding.
    ahead: compile the programs here; False leaves them jitted, uncompiled (to export them).

  Returns:
    The ``Grid``.
  """
  c = setup.config  # validated: its mesh divides the devices and the batch
  shards = data_shards_for(c.train.data_shards, num_models, c.train.batch_size,
                           jax.device_count())
  mesh = grid_mesh(shards)
  programs = make_programs(setup, shards)
  shared = (eval_sets_for(setup, setup.config.seed),)

  def init(key, hp, *_):  # a sweep's model starts from its key and hyper-parameters alone
    return programs.init(key, hp)

  hp = {name: jax.ShapeDtypeStruct((), jnp.float32) for name in HYPERPARAMETERS}
  return Grid.of(init, programs.chunk, num_models, c.train.models_per_vmap, shared, mesh,
                per_model=hp, ahead=ahead)


def _check_models(hyperparameters: dict, keys: np.ndarray) -> int:
  """The number of models, once every per-model array agrees on it."""
  missing = [name for name in HYPERPARAMETERS if name not in hyperparameters]
  if missing:
    raise ValueError(f"hyperparameters lack {missing}; the grid needs {HYPERPARAMETERS}")
  keys = np.asarray(keys)
  if keys.ndim != 2 or not len(keys):
    raise ValueError(f"keys must be raw key data shaped [models, key size], got {keys.shape}")
  for name, value in hyperparameters.items():
    if np.shape(value) != (len(keys),):
      raise ValueError(f"hyperparameters[{name!r}] has shape {np.shape(value)}; the grid has "
                       f"{len(keys)} models (one key each)")
  return len(keys)


def train_grid(config: ml_collections.ConfigDict, arch: str, *,
               hyperparameters: Optional[dict] = None, keys: Optional[np.ndarray] = None,
               resume: Optional[Callable] = None,
               on_chunk: Optional[Callable] = None) -> GridRun:
  """Train the grid of one architecture at one static configuration: init, then
  ``num_steps / eval_every`` chunks, each followed by an evaluation.

  Args:
    config: a sweep config at one static point (``config.point_config``); validated first.
    arch: one of ``config.archs``' architectures.
    hyperparameters: per-model ``{"learning_rate", "l2", "dropout"}`` float32 arrays
      ``[models]``; by default the config's models axis (learning rates x vmapped sweep x
      seeds).
    keys: per-model raw key data ``[models, 2]``; by default ``model_keys`` of the config's
      seeds. Give both or neither.
    resume: ``(grid, state, hp) -> (chunks done, state, metrics so far)``, called once with the
      freshly initialised sharded state, before any chunk: how a caller restores a checkpoint
      (the state sharded as the one given; the metrics ``{name: [evaluations, models]}``
      writable arrays that the run goes on filling, or ``{}`` with 0 chunks done). Raising
      stops the run before it trains.
    on_chunk: ``(chunks done, state, metrics so far) -> None``, called after every chunk with
      the sharded state and the metrics filled up to that chunk (for logging, checkpoints and
      budgets; raising stops the run).

  Returns:
    ``GridRun``: the metrics ``{name: [evaluations, models]}`` (train_loss, train_acc, val_acc,
    the task's extra metrics, diverged) and the final states.
  """
  config_lib.validate(config)
  if (hyperparameters is None) != (keys is None):
    raise ValueError("give both hyperparameters and keys, or neither (the config's grid)")
  if hyperparameters is None:
    axis = ModelsAxis.of(config)
    hyperparameters, keys = axis.hyperparameters(), model_keys(config.seed, axis.seed_indices())
  num_models = _check_models(hyperparameters, keys)
  if not traces_l2(config) and np.any(np.asarray(hyperparameters["l2"]) != 0):
    raise ValueError("hyperparameters['l2'] holds non-zero weights, but config.train.l2 is 0 "
                     "and not swept and train.drop_zero_l2 leaves the L2 term out; set "
                     "config.sweep.name='train.l2' for per-model weights")
  if not traces_dropout(config) and np.any(np.asarray(hyperparameters["dropout"]) != 0):
    raise ValueError("hyperparameters['dropout'] holds non-zero rates, but config.train.dropout "
                     "is 0 and not swept, so the program draws no dropout; set "
                     "config.sweep.name='train.dropout' for per-model rates")
  grid = build_grid(Setup(arch, config), num_models)
  hp = {k: np.asarray(v, np.float32) for k, v in hyperparameters.items()}
  return run_grid(grid, keys, hp, config.train.num_steps // config.train.eval_every,
                  resume=resume, on_chunk=on_chunk)
