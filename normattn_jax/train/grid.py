"""Many-model training: a grid of models (seeds x learning rates x numeric hyper-parameters) of
one static configuration as ONE compiled program.

Training is a pure function of (rng, hyper-parameters):
``init(key, hp) -> state`` and ``chunk(state, hp) -> (state, metrics)``, the latter a
``lax.scan`` over ``eval_every`` steps followed by the evaluation. Both are written for one
model and mapped over a flattened leading "models" axis, sharded over all devices: each device
runs its share as a ``lax.map`` over vmaps of ``train.models_per_vmap`` models (``over_models``). Data are generated on device inside the step, a fresh batch every step.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from normattn_jax.models.sequence import SequenceModel
from normattn_jax.tasks import synthetic
from normattn_jax.train.optim import make_optimizer

Array = jax.Array
CASE_METRICS = tuple(f"case_acc_{c}" for c in synthetic.CASES)
VAL_CASE_METRICS = tuple(f"val_case_acc_{c}" for c in synthetic.CASES)


class TrainState(NamedTuple):
  params: Any
  opt_state: Any
  step: Array       # int32
  key: Array        # raw uint32 key data: data and dropout keys are fold_in(key, step)
  diverged: Array   # bool: a non-finite loss was seen


def _flag(value: str, default: bool) -> bool:
  return default if value in ("", "auto") else value == "true"


@dataclasses.dataclass(frozen=True)
class Setup:
  """The static part of a grid: one architecture at one point of the shape sweeps."""
  arch: str
  config: ml_collections.ConfigDict

  @property
  def task(self):
    return self.config.task

  @property
  def is_case_task(self) -> bool:
    return self.task.name == "case_distinction"

  @property
  def val_len(self) -> int:
    """The NAP paper validates case tasks at N/2 and the mode task at 2N; majority stays at N."""
    if self.task.name == "majority":
      return self.task.seq_len
    return self.task.seq_len // 2 if self.is_case_task else 2 * self.task.seq_len

  @property
  def warmup_steps(self) -> int:
    warm = _flag(self.config.train.warmup, self.arch == "bert")
    return self.config.train.num_steps // 10 if warm else 0

  @property
  def clip_norm(self):
    return 1.0 if _flag(self.config.train.clip, self.arch == "bert") else None

  def model(self) -> SequenceModel:
    c = self.config
    positional = c.model.positional and self.is_case_task  # counting tasks have none (paper)
    return SequenceModel(
        vocab_size=self.task.vocab_size, max_len=max(self.task.seq_len, self.val_len),
        d_model=c.model.d_model, num_layers=c.model.num_layers, num_heads=c.model.num_heads,
        arch=self.arch, normalization=c.normalization or None,
        normalize=None if c.model.normalize in ("", "auto") else c.model.normalize == "true",
        attention_gelu=(None if c.model.attention_gelu in ("", "auto")
                        else c.model.attention_gelu == "true"),
        output=self.task.output, positional=positional, dropout_rate=c.train.dropout)

  def sample(self, key: Array, batch_size: int, seq_len: int):
    """(inputs, labels) for one batch of the task."""
    if self.is_case_task:
      batch = synthetic.case_distinction(key, batch_size, seq_len, self.task.vocab_size)
      return batch.inputs, batch.labels
    if self.task.name == "majority":
      return synthetic.majority(key, batch_size, seq_len, self.task.vocab_size,
                                self.task.min_margin)
    return synthetic.mode_finding(key, batch_size, seq_len, self.task.vocab_size)


TRAIN_STREAM, EVAL_STREAM = 0, 1


def _stream(key_data: Array, stream: int) -> Array:
  """Independent key streams of one model: training batches/dropout, and evaluation batches."""
  return jax.random.fold_in(jax.random.wrap_key_data(key_data), stream)


def l2_penalty(params) -> Array:
  """Sum of squared kernels (Keras' kernel regulariser: no biases, gains or embeddings)."""
  leaves = jax.tree_util.tree_leaves_with_path(params)
  return sum(jnp.sum(jnp.square(x)) for path, x in leaves
             if getattr(path[-1], "key", None) == "kernel")


class Programs(NamedTuple):
  """The pure functions of ONE model; the caller vmaps and jits them."""
  init: Callable        # (key_data, hp) -> TrainState
  train_step: Callable  # (state, hp) -> (state, (loss, accuracy))
  chunk: Callable       # (state, hp, case_sets) -> (state, metrics): eval_every steps + evaluation


def make_programs(setup: Setup) -> Programs:
  """The training and evaluation functions of one model of ``setup``."""
  c = setup.config
  model = setup.model()
  num_steps, batch_size = c.train.num_steps, c.train.batch_size
  n = setup.task.seq_len
  deterministic = c.train.dropout == 0

  def optimizer(lr):
    return make_optimizer(lr, num_steps, setup.warmup_steps, setup.clip_norm)

  def init(key: Array, hp: dict) -> TrainState:
    params = model.init(jax.random.wrap_key_data(key), jnp.zeros((1, n), jnp.int32))
    opt_state = optimizer(hp["learning_rate"]).init(params)
    return TrainState(params, opt_state, jnp.zeros((), jnp.int32),
                      jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(key), 1)),
                      jnp.zeros((), bool))

  def loss_fn(params, inputs, labels, hp, dropout_key):
    logits = model.apply(params, inputs, deterministic=deterministic,
                         rngs=None if deterministic else {"dropout": dropout_key})
    logits = logits.astype(jnp.float32)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    acc = jnp.mean(jnp.argmax(logits, -1) == labels)
    return loss + hp["l2"] * l2_penalty(params), (loss, acc)

  def train_step(state: TrainState, hp: dict):
    key = jax.random.fold_in(_stream(state.key, TRAIN_STREAM), state.step)
    data_key, dropout_key = jax.random.split(key)
    inputs, labels = setup.sample(data_key, batch_size, n)
    grads, (loss, acc) = jax.grad(loss_fn, has_aux=True)(state.params, inputs, labels, hp,
                                                          dropout_key)
    updates, opt_state = optimizer(hp["learning_rate"]).update(grads, state.opt_state,
                                                                state.params)
    params = optax.apply_updates(state.params, updates)
    diverged = state.diverged | ~jnp.isfinite(loss)
    return TrainState(params, opt_state, state.step + 1, state.key, diverged), (loss, acc)

  def accuracy(params, inputs, labels):
    return jnp.mean(jnp.argmax(model.apply(params, inputs), -1) == labels)

  def evaluate(state: TrainState, case_sets) -> dict:
    eval_key = jax.random.fold_in(_stream(state.key, EVAL_STREAM), state.step)
    keys = jax.random.split(eval_key, c.eval.val_batches)
    val = jax.lax.map(lambda k: accuracy(state.params, *setup.sample(k, batch_size,
                                                                     setup.val_len)), keys)
    metrics = {"val_acc": jnp.mean(val)}
    if setup.is_case_task:
      for names, case_set in zip((CASE_METRICS, VAL_CASE_METRICS), case_sets):
        inputs, labels = case_set  # [3 cases, chunks, chunk_size, (length)]
        flat = (inputs.reshape((-1,) + inputs.shape[2:]), labels.reshape((-1,) + labels.shape[2:]))
        per_chunk = jax.lax.map(lambda batch: accuracy(state.params, *batch), flat)
        metrics.update(zip(names, jnp.mean(per_chunk.reshape(labels.shape[:2]), axis=-1)))
    return metrics

  def chunk(state: TrainState, hp: dict, case_sets) -> tuple[TrainState, dict]:
    state, (loss, acc) = jax.lax.scan(lambda s, _: train_step(s, hp), state, None,
                                      length=c.train.eval_every)
    metrics = {"train_loss": jnp.mean(loss), "train_acc": jnp.mean(acc),
               **evaluate(state, case_sets)}
    metrics["diverged"] = state.diverged
    # a diverged model has failed: its accuracies are 0, not whatever argmax(NaN) hits
    return state, {k: (v if k in ("diverged", "train_loss") else jnp.where(state.diverged, 0.0, v))
                   for k, v in metrics.items()}

  return Programs(init, train_step, chunk)


def case_sets_for(setup: Setup, seed: int, chunk_size: int = 250):
  """The balanced case sets at N and at the validation length, shared by every model,
  shaped ``[3 cases, chunks, chunk_size, length]`` for a memory-bounded ``lax.map``."""
  if not setup.is_case_task:
    return ()
  c = setup.config
  per_case = c.eval.case_set_size
  chunk_size = min(chunk_size, per_case)
  while per_case % chunk_size:
    chunk_size -= 1
  sets = []
  for i, length in enumerate((setup.task.seq_len, setup.val_len)):
    key = jax.random.fold_in(jax.random.key(seed), 1000 + i)
    batch = synthetic.balanced_case_set(key, per_case, length, setup.task.vocab_size)
    shape = (3, per_case // chunk_size, chunk_size)
    sets.append((batch.inputs.reshape(shape + (length,)), batch.labels.reshape(shape)))
  return tuple(sets)


def models_sharding() -> NamedSharding:
  mesh = Mesh(np.asarray(jax.devices()), ("models",))
  return NamedSharding(mesh, P("models"))


def models_per_vmap(config: ml_collections.ConfigDict, num_models: int) -> int:
  """How many models one vmap holds: ``train.models_per_vmap``, or when it is 0 one on a CPU
  (the fastest there at the NAP paper's defaults, BENCHMARKS.md) and each device's
  whole share on an accelerator."""
  if config.train.models_per_vmap:
    return config.train.models_per_vmap
  return 1 if jax.default_backend() == "cpu" else -(-num_models // jax.device_count())


def padded_count(num_models: int, per_vmap: int) -> int:
  """The models axis rounded up so that every device holds whole vmaps."""
  return -(-num_models // (per_vmap * jax.device_count())) * per_vmap * jax.device_count()


def pad_models(x: np.ndarray, count: int) -> np.ndarray:
  """Repeat the last model until the models axis has ``count`` entries."""
  extra = count - len(x)
  return np.concatenate([x, np.repeat(x[-1:], extra, axis=0)]) if extra else x


def over_models(fn: Callable, per_vmap: int) -> Callable:
  """``fn`` of one model -> ``fn`` over the models axis: each device's share runs as a
  ``lax.map`` over vmaps of ``per_vmap`` models. XLA compiles a model's arithmetic by the
  shapes it runs in, so fixing the vmap's width makes each model's numbers independent of how
  many other models, and which, share the program (a vmap over the whole axis would not)."""
  devices = jax.device_count()

  def run(*args):
    split = lambda x: x.reshape((devices, -1) + x.shape[1:])
    merge = lambda x: x.reshape((-1,) + x.shape[2:])
    per_device = lambda *a: jax.lax.map(lambda b: fn(*b), a, batch_size=per_vmap)
    return jax.tree.map(merge, jax.vmap(per_device)(*jax.tree.map(split, args)))
  return run


@dataclasses.dataclass
class Grid:
  """The compiled, sharded programs of one static configuration, for ``num_models`` models
  (padded to ``padded`` so that every device holds whole vmaps of ``per_vmap`` models)."""
  setup: Setup
  num_models: int
  per_vmap: int
  padded: int
  init: Callable
  chunk: Callable

  @classmethod
  def build(cls, setup: Setup, num_models: int) -> "Grid":
    init_one, _, chunk_one = make_programs(setup)
    case_sets = case_sets_for(setup, setup.config.seed)
    per_vmap = models_per_vmap(setup.config, num_models)
    sharding = models_sharding()
    init = jax.jit(over_models(init_one, per_vmap), out_shardings=sharding)
    chunk = jax.jit(over_models(lambda s, hp: chunk_one(s, hp, case_sets), per_vmap),
                    out_shardings=(sharding, sharding), donate_argnums=0)
    return cls(setup, num_models, per_vmap, padded_count(num_models, per_vmap), init, chunk)

  def shard(self, tree):
    """Pad the models axis of a host tree and place it on the devices."""
    return jax.device_put(jax.tree.map(lambda x: pad_models(x, self.padded), tree),
                          models_sharding())
