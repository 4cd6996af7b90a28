"""Fine-tuning grids: every seed and learning rate of a task as the models axis of ONE compiled
program, as the synthetic sweeps train theirs (``train.grid``).

A model of the grid is a head (``finetune.heads``) on an encoder whose parameters come from a
starting point (``finetune.encoders``); seeds differ in the head's initialisation, the dropout
keys and the order of the training examples, and seed s has the same ones at every learning
rate. The optimiser is BERT's fine-tuning AdamW (global-norm clipping, Adam moments without
bias correction, decoupled weight decay except on LayerNorm parameters, biases and HNAS's u,
linear warm-up then linear decay) with the learning rate in the optimiser state, so that one
program trains all of them. The dev split is scored at fixed intervals, with no early stopping:
the result of a model is its last evaluation. The kind of run "finetuning" (``train.kinds``;
``runs.run`` or ``run_finetuning``) writes ``config.json``,
``starting_point.json`` (what the encoder started from: a resumed run refuses another),
``history.jsonl``, TensorBoard scalars, orbax checkpoints (a killed run resumes with the same
numbers), ``metrics.npz`` and, last, ``summary.json``: per learning rate the mean, standard
error, min and max over the seeds (with HNAS, each seed's u per layer and head at the end), and
the best learning rate (its figure: ``reporting.training_figures.finetuning_curves``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from normattn_jax._extras import require
from normattn_jax.finetune import encoders
from normattn_jax.finetune import heads as heads_lib
from normattn_jax.finetune import task as task_lib
from normattn_jax.train import grid as grid_lib
from normattn_jax.train import kinds, multihost, runs
from normattn_jax.train.checkpoint import WorkdirError, write_json
from normattn_jax.attention.section import with_attention_section
from normattn_jax.train.optim import (lamb_adapted, scale_by_adam_without_bias_correction,
                                      schedule_shape)
from normattn_jax.train.driver import Budget, RunHooks
from normattn_jax.train.layout import GroupSeedAxis
from normattn_jax.train.run_log import RunLog
from normattn_jax.train.runs import RunContext
from normattn_jax.attention.section import attention_section, attention_spec
from normattn_jax.validation import check_known_fields
from normattn_jax.train.state import TRAIN_STREAM, TrainState
from normattn_jax.validation import check_config_float, check_config_int, check_fields
from normattn_jax.validation import fail_config as _fail

# An optional package: without it, the error names the extra that installs it.
ml_collections = require("ml_collections", "all")


def base_finetune_config() -> ml_collections.ConfigDict:
  """The offline genre task on a pre-training workdir's encoder, 3 learning rates x 5 seeds;
  ``configs/finetune_*.py`` start from it."""
  c = ml_collections.ConfigDict()
  c.kind = "finetuning"  # the kind of run (train.kinds)
  # encoder.attention.name: "" keeps the encoder's normalisation, a registered one switches to it
  c.encoder = ml_collections.ConfigDict(dict(
      kind="pretraining", path="", attention=attention_section(), dropout=0.0))
  c.task = ml_collections.ConfigDict(dict(
      name="shakespeare_genre", max_seq_length=64, cache_dir="", data_dir="", max_examples=0,
      passage_lines=4, validation_fraction=0.05, dev_fraction=0.3))
  c.learning_rates = (1e-4, 3e-4, 1e-3)
  c.num_seeds = 5
  c.seed = 0
  c.train = ml_collections.ConfigDict(dict(
      batch_size=16, num_steps=300, warmup_steps=30, weight_decay=0.01, clip_norm=1.0,
      classifier_dropout=0.1, eval_every=100, eval_batch_size=128, checkpoint_every=1,
      models_per_vmap=0))
  return c


def downstream_config(task: str, *, learning_rate: float, batch_size: int, num_steps: int,
                      warmup_steps: int, max_seq_length: int, encoder_dropout: float = 0.0,
                      eval_every: int = 0) -> ml_collections.ConfigDict:
  """A GLUE, SQuAD or RACE task (``finetune.tfds_tasks``) with the DNAS paper's settings (its
  Table 5, ALBERT's): one learning rate, 5 seeds, classifier dropout 0.1.

  Args:
    task: a task of ``finetune.tfds_tasks``.
    learning_rate: the peak learning rate.
    batch_size: examples per step.
    num_steps: training steps.
    warmup_steps: linear warm-up steps.
    max_seq_length: L.
    encoder_dropout: the encoder's dropout ("BERT DR").
    eval_every: steps between dev evaluations (it must divide ``num_steps``; 0: once at the
      end).

  Returns:
    The config, its encoder a pre-training workdir to be given (``--config.encoder.path``).
  """
  c = base_finetune_config()
  c.encoder.update(kind="pretraining", path="runs/albert_large_dnas_paper/softmax",
                   dropout=encoder_dropout)
  c.task = ml_collections.ConfigDict(dict(name=task, max_seq_length=max_seq_length, cache_dir="",
                                          data_dir="", max_examples=0))
  c.learning_rates = (learning_rate,)
  c.train.update(batch_size=batch_size, num_steps=num_steps, warmup_steps=warmup_steps,
                 eval_every=eval_every or num_steps, eval_batch_size=256)
  return c


def _fraction(field: str, value, closed_high: bool = False) -> None:
  check_config_float(field, value, 0, 1, open_high=not closed_high)


def validate_finetune_config(c: ml_collections.ConfigDict, check_paths: bool = True) -> None:
  """Check every field before anything is read, written or compiled; errors name the field
  and the value.

  Args:
    c: the fine-tuning config.
    check_paths: also check what the config's paths hold: that ``encoder.path`` holds what
      ``encoder.kind`` needs and, for a pre-training workdir and an offline task, that both
      hold out the same documents; and the task's data (its registered check, e.g. that the
      offline task's corpus gives both splits examples).
  """
  check_known_fields(c, base_finetune_config(), free=("encoder.attention.options",))
  kinds.check_kind(c, "finetuning", absent_is_expected=True)
  e = c.encoder
  if e.kind not in encoders.ENCODER_KINDS:
    _fail("encoder.kind", e.kind, f"must be one of {encoders.ENCODER_KINDS}")
  if check_paths:
    _check_encoder_path(c)
  if e.kind == "minilm" and e.path:
    _fail("encoder.path", e.path, "must be '' for the bundled MiniLM")
  attention_spec(e.attention, "encoder.attention", keep=True)
  _fraction("encoder.dropout", e.dropout)
  if c.task.name not in task_lib.REGISTRY:
    _fail("task.name", c.task.name, f"must be a registered fine-tuning task, one of "
          f"{task_lib.names()}")
  check_config_int("task.max_seq_length", c.task.max_seq_length, 8)
  check_config_int("task.max_examples", c.task.max_examples, 0)
  rates = tuple(c.learning_rates)
  check_fields(c, ("learning_rates",))
  if len(set(rates)) != len(rates):
    _fail("learning_rates", rates, "must not repeat a value")
  check_fields(c, ("num_seeds", "seed", "train.batch_size", "train.num_steps",
                   "train.eval_every"))
  t = c.train
  check_config_int("train.eval_batch_size", t.eval_batch_size, 1)
  check_fields(c, ("train.warmup_steps", "train.checkpoint_every", "train.models_per_vmap"))
  if t.warmup_steps >= t.num_steps:
    _fail("train.warmup_steps", t.warmup_steps, f"must be below train.num_steps ({t.num_steps})")
  if t.num_steps % t.eval_every:
    _fail("train.eval_every", t.eval_every, f"must divide train.num_steps ({t.num_steps})")
  check_fields(c, ("train.weight_decay", "train.clip_norm"))
  _fraction("train.classifier_dropout", t.classifier_dropout)
  if check_paths:  # the chief fetches the task's data into the shared cache, the others read it
    multihost.chief_first("normattn_jax finetune check",
                          lambda: task_lib.check_config(c.task.name, c.task))


def _check_encoder_path(c: ml_collections.ConfigDict) -> None:
  e = c.encoder
  needs = {"pretraining": "the workdir of a pre-training run",
           "huggingface": "a HuggingFace model folder"}
  if e.kind in needs and not os.path.isfile(os.path.join(e.path, "config.json")):
    _fail("encoder.path", e.path, f"must be {needs[e.kind]} (with config.json)")
  if e.kind == "pretraining" and "validation_fraction" in c.task:
    held_out = encoders.pretraining_config(e.path).data.validation_fraction
    if held_out != c.task.validation_fraction:
      _fail("task.validation_fraction", c.task.validation_fraction,
            f"must equal the pre-training run's data.validation_fraction ({held_out}), so that "
            f"the task's documents are the ones it held out")


STARTING_POINT = "starting_point.json"  # in a fine-tuning workdir: what its encoder started from


def starting_point_record(c: ml_collections.ConfigDict, start: encoders.StartingPoint) -> dict:
  """What a fine-tuning run starts from: the encoder's kind and path, the pre-training
  checkpoint's step and a hash of the parameters."""
  return {"encoder.kind": c.encoder.kind, "encoder.path": c.encoder.path, "step": start.step,
          "parameters_sha256": encoders.parameters_sha256(start.params)}


def pin_starting_point(workdir: str, record: dict) -> None:
  """Store the starting point of a new run (``STARTING_POINT``), or refuse to resume one from
  another: its checkpoints would go on from an encoder that is no longer the one at
  ``encoder.path`` (e.g. its pre-training workdir was run again with ``--afresh``), and its
  summary would name the new one. A workdir from before the record pins what it resumes with."""
  path = os.path.join(workdir, STARTING_POINT)
  if os.path.exists(path):
    with open(path) as f:
      stored = json.load(f)
    changed = [f"{key} was {stored.get(key)!r}, now {record.get(key)!r}"
               for key in sorted(stored.keys() | record.keys())
               if stored.get(key) != record.get(key)]
    if changed:
      raise WorkdirError(f"workdir {workdir} fine-tunes another starting point: "
                         f"{'; '.join(changed)}. Restore the encoder it started from, use "
                         f"another workdir, or start afresh (--afresh, afresh=True) to move it "
                         f"aside")
  elif multihost.is_chief():
    write_json(path, record, indent=2, sort_keys=True)


def adamw(learning_rate, num_steps: int, warmup_steps: int, weight_decay: float,
          clip_norm: float) -> optax.GradientTransformation:
  """BERT's fine-tuning optimiser with ``learning_rate`` as data (a traced per-model scalar is
  stored in the state, not baked into the program).

  Args:
    learning_rate: the peak learning rate.
    num_steps: the linear decay reaches 0 here.
    warmup_steps: linear warm-up from 0 (BERT's shape: the decay has begun under it).
    weight_decay: decoupled weight decay, skipped where ``optim.lamb_adapted`` says.
    clip_norm: the global gradient norm is clipped to it.

  Returns:
    The optax chain.
  """
  return optax.chain(
      optax.clip_by_global_norm(clip_norm),
      scale_by_adam_without_bias_correction(0.9, 0.999, 1e-6),
      optax.add_decayed_weights(weight_decay, lamb_adapted),
      optax.scale_by_schedule(schedule_shape(num_steps, warmup_steps)),
      optax.inject_hyperparams(optax.scale)(step_size=-jnp.asarray(learning_rate, jnp.float32)),
  )


def models_axis(c: ml_collections.ConfigDict) -> GroupSeedAxis:
  """The models axis: learning rate x seed, seed innermost (``train.layout``)."""
  return GroupSeedAxis(len(c.learning_rates), c.num_seeds)


def hyperparameter_grid(c: ml_collections.ConfigDict) -> tuple[dict, np.ndarray]:
  """The models axis' per-model inputs. Returns ``({"learning_rate": [M]}, seed index per
  model [M])``."""
  axis = models_axis(c)
  hp = {"learning_rate": np.asarray(c.learning_rates, np.float32)[axis.group_indices()]}
  return hp, axis.seed_indices()


def batch_rows(seed: int, seed_index: int, first_step: int, num_steps: int, batch_size: int,
               num_examples: int) -> np.ndarray:
  """The training rows of ``num_steps`` steps from ``first_step``, ``[num_steps, batch]``: the
  examples in a fresh order every epoch, a pure function of (seed, seed index, step)."""
  positions = np.arange(first_step * batch_size, (first_step + num_steps) * batch_size)
  epochs = positions // num_examples
  rows = np.empty_like(positions)
  for epoch in np.unique(epochs):
    order = np.random.default_rng([seed, seed_index, int(epoch)]).permutation(num_examples)
    chosen = epochs == epoch
    rows[chosen] = order[positions[chosen] % num_examples]
  return rows.reshape(num_steps, batch_size).astype(np.int32)


def eval_batches(arrays: dict, batch_size: int) -> tuple[dict, int]:
  """The dev arrays padded (with their first row) to whole batches, ``[batches, batch, ...]``;
  also the number of real rows."""
  n = len(next(iter(arrays.values())))
  size = min(batch_size, n)
  count = -(-n // size)
  out = {}
  for name, value in arrays.items():
    padded = np.concatenate([value, np.repeat(value[:1], count * size - n, axis=0)])
    out[name] = padded.reshape((count, size) + value.shape[1:])
  return out, n


@dataclasses.dataclass(frozen=True)
class FinetunePrograms:
  """The pure functions of ONE model, for ``grid.Grid.of``: each model's own inputs are
  ``{"learning_rate", "rows" [eval_every, batch]}``, the shared ones ``(train arrays, dev
  batches, pre-trained encoder parameters)``."""
  model: Any
  init: Callable   # (key_data, per_model, train, dev, pretrained) -> TrainState
  chunk: Callable  # (state, per_model, train, dev, pretrained) -> (state, outputs)


def make_programs(c: ml_collections.ConfigDict, task: task_lib.FinetuneTask,
                  start: encoders.StartingPoint) -> FinetunePrograms:
  """The fine-tuning functions of one model of the grid.

  Args:
    c: the fine-tuning config.
    task: the task (its head and the shape of its features).
    start: the starting point (encoder module and its parameters' place).

  Returns:
    ``FinetunePrograms`` with ``init`` and ``chunk`` for one model.
  """
  head = heads_lib.get(task.head)
  model = head.build(start.module, task.num_labels, c.train.classifier_dropout)
  deterministic = c.encoder.dropout == 0 and c.train.classifier_dropout == 0
  t = c.train
  optimizer = lambda lr: adamw(lr, t.num_steps, t.warmup_steps, t.weight_decay, t.clip_norm)
  tx = optimizer(0.0)  # the structure: each model's rate lives in its optimiser state
  example = {k: v[:1] for k, v in task.arrays("train").items() if k in task_lib.FEATURES}

  def init(key_data, per_model, train, dev, pretrained) -> TrainState:
    del train, dev
    init_key, state_key = jax.random.split(jax.random.wrap_key_data(key_data))
    params = dict(model.init(init_key, example)["params"])
    params["encoder"] = encoders.overlay(params["encoder"], pretrained)
    state = TrainState.create(apply_fn=model.apply, params=params, tx=tx, key=state_key)
    return state.replace(opt_state=optimizer(per_model["learning_rate"]).init(params))

  def loss_fn(params, batch, dropout_key):
    outputs = model.apply({"params": params}, batch, deterministic=deterministic,
                          rngs=None if deterministic else {"dropout": dropout_key})
    return head.loss(outputs, batch)

  def train_step(state: TrainState, rows, train):
    batch = jax.tree.map(lambda x: x[rows], train)
    loss, grads = jax.value_and_grad(loss_fn)(state.params, batch,
                                              state.step_key(TRAIN_STREAM))
    return state.apply_gradients(grads=grads, loss=loss), loss

  def predict_batch(params, batch):
    """The batch's predictions, and whether its outputs were finite (argmax(NaN) is no
    prediction)."""
    outputs = model.apply({"params": params}, batch)
    finite = jnp.all(jnp.stack([jnp.isfinite(x).all() for x in jax.tree.leaves(outputs)]))
    return head.predict(outputs, batch), finite

  def chunk(state: TrainState, per_model, train, dev, pretrained):
    del pretrained
    state, losses = jax.lax.scan(lambda s, r: train_step(s, r, train), state, per_model["rows"])
    predictions, finite = jax.lax.map(lambda batch: predict_batch(state.params, batch), dev)
    # parameters that blew up in the chunk's last step: the loss was finite, the outputs are not
    state = state.replace(diverged=state.diverged | ~finite.all())
    return state, {"train_loss": jnp.mean(losses), "diverged": state.diverged,
                   "predictions": predictions}

  return FinetunePrograms(model, init, chunk)


def build_grid(c: ml_collections.ConfigDict, task: task_lib.FinetuneTask,
               start: encoders.StartingPoint, num_models: int, *,
               ahead: bool = True) -> tuple[grid_lib.Grid, FinetunePrograms]:
  """The fine-tuning grid on the engine (``grid.Grid.of``): the task's arrays, the dev batches
  and the pre-trained parameters shared by every model, the vmap width memory-aware as a
  sweep's (``Grid.of``).

  Args:
    c: the fine-tuning config.
    task: the task.
    start: the starting point.
    num_models: the models of the grid (learning rates x seeds).
    ahead: compile its programs here (``Grid.of``); False leaves them jitted (to export them).

  Returns:
    ``(grid, programs)``.
  """
  programs = make_programs(c, task, start)
  dev, _ = eval_batches(task.arrays("dev"), c.train.eval_batch_size)
  shared = (task.arrays("train"), dev, start.params)

  per_model = {"learning_rate": jax.ShapeDtypeStruct((), jnp.float32),
               "rows": jax.ShapeDtypeStruct((c.train.eval_every, c.train.batch_size), jnp.int32)}
  grid = grid_lib.Grid.of(programs.init, programs.chunk, num_models, c.train.models_per_vmap,
                          shared, per_model=per_model, ahead=ahead)
  return grid, programs


def _stats(values: np.ndarray) -> dict:
  """Mean, standard error (the DNAS paper's +-), min and max over the seeds that did not
  diverge; None where every seed diverged."""
  finite = values[np.isfinite(values)]
  if not len(finite):
    return {"mean": None, "std_error": None, "min": None, "max": None, "seeds": 0}
  error = float(np.std(finite, ddof=1) / np.sqrt(len(finite))) if len(finite) > 1 else 0.0
  return {"mean": float(np.mean(finite)), "std_error": error, "min": float(np.min(finite)),
          "max": float(np.max(finite)), "seeds": int(len(finite))}


def summarise(c, task: task_lib.FinetuneTask, history: dict) -> dict:
  """Per learning rate, the statistics over seeds of every metric at the last evaluation, and
  the best learning rate. A diverged seed counts in ``diverged``, not in the statistics, and as
  a failure in the choice: the best learning rate is one with the fewest diverged seeds, and
  among those the best mean main metric (so a rate where most seeds blew up never wins on the
  mean of the few that did not)."""
  n_seeds = c.num_seeds
  cells = []
  for i, lr in enumerate(c.learning_rates):
    rows = models_axis(c).rows(i)
    diverged = history["diverged"][-1, rows].astype(bool)
    cell = {"learning_rate": float(lr), "diverged": int(diverged.sum()),
            "train_loss": _stats(np.where(diverged, np.nan, history["train_loss"][-1, rows]))}
    for name in task.metrics:
      cell[name] = _stats(history[name][-1, rows])
      cell[name]["per_seed"] = [None if not np.isfinite(v) else float(v)
                                for v in history[name][-1, rows]]
    cells.append(cell)
  main = task.metrics[0]
  scored = [cell for cell in cells if cell[main]["mean"] is not None]
  best = max(scored, key=lambda cell: (-cell["diverged"], cell[main]["mean"])) if scored else None
  return {"task": task.name, "task_description": task.description, "head": task.head,
          "metric": main, "metrics": list(task.metrics), "cells": cells, "best": best,
          "num_seeds": n_seeds, "steps": c.train.num_steps,
          "eval_steps": [(i + 1) * c.train.eval_every for i in range(len(history["diverged"]))],
          "train_examples": len(task.train["input_ids"]),
          "dev_examples": len(task.dev["input_ids"])}


def _natural_key(path) -> tuple:
  """A parameter path as a sort key in which ``layer_10`` follows ``layer_9``."""
  parts = re.split(r"(\d+)", jax.tree_util.keystr(path))
  return tuple(int(p) if p.isdigit() else p for p in parts)


def hybrid_weights(params) -> Optional[np.ndarray]:
  """HNAS's u as the attention uses it (clipped to [0, 1]), ``[models, layers, heads]`` in layer
  order, from parameters with a leading models axis; None without HNAS. A layer's own module
  holds ``hybrid_weight [models, heads]``, an ALBERT encoder that shares its layers
  ``hybrid_weights [models, layers, heads]``; u moves in fine-tuning, so the end's is recorded."""
  leaves = [(path, np.asarray(leaf)) for path, leaf in jax.tree_util.tree_leaves_with_path(params)
            if jax.tree_util.keystr(path[-1:]) in ("['hybrid_weight']", "['hybrid_weights']")]
  if not leaves:
    return None
  leaves.sort(key=lambda item: _natural_key(item[0]))
  per_layer = [u[:, None] if u.ndim == 2 else u for _, u in leaves]
  return np.clip(np.concatenate(per_layer, axis=1), 0.0, 1.0)


def with_hybrid_weights(summary: dict, c, u: Optional[np.ndarray]) -> dict:
  """``summary`` with each learning rate's u per seed, layer and head at the last step
  (``hybrid_weights``, from ``hybrid_weights``) in its cell; unchanged without HNAS."""
  if u is None:
    return summary
  for i, cell in enumerate(summary["cells"]):
    cell["hybrid_weights"] = u[models_axis(c).rows(i)].tolist()
  return summary


def _score(task: task_lib.FinetuneTask, predictions: np.ndarray, diverged: bool) -> dict:
  """A model's dev metrics; NaN (counted as diverged, never averaged) for a diverged model."""
  if diverged:
    return {name: np.nan for name in task.metrics}
  scores = task.score(predictions)
  return {name: float(scores[name]) for name in task.metrics}


def _record(log: RunLog, c, task, step: int, metrics: dict) -> None:
  """One history row per learning rate: the means over its seeds."""
  for i, lr in enumerate(c.learning_rates):
    rows = models_axis(c).rows(i)
    scalars = {"diverged": int(metrics["diverged"][rows].sum())}
    for name in ("train_loss",) + tuple(task.metrics):
      values = metrics[name][rows]
      finite = values[np.isfinite(values)]
      scalars[name] = float(np.mean(finite)) if len(finite) else None
    log.record(step, scalars, learning_rate=f"{lr:g}")


class FinetuneResults(NamedTuple):
  """What the fine-tuning kind's ``train`` gives its ``summarise`` and ``save``."""
  history: dict  # name -> [evaluations, models]
  summary: dict


def train_finetuning(c: ml_collections.ConfigDict, context: RunContext) -> FinetuneResults:
  """The fine-tuning kind's ``train``: load the starting point (pinned in the workdir) and the
  task, then train the grid, resumed from its checkpoints and paid from the budget."""
  workdir = context.workdir
  start = encoders.load_starting_point(c.encoder)
  pin_starting_point(workdir, starting_point_record(c, start))
  # every process needs the task; the chief fetches and prepares its data (corpus, TFDS) into
  # the shared cache, the others then read it
  task = multihost.chief_first("normattn_jax finetune task",
                               lambda: task_lib.load(c.task.name, start.tokenizer, c.task))
  if task.seq_len > start.max_positions:
    _fail("task.max_seq_length", task.seq_len,
          f"exceeds the encoder's max_position_embeddings ({start.max_positions})")
  task.check_ids(start.module.config.vocab_size, start.module.config.type_vocab_size)
  hp, seeds = hyperparameter_grid(c)
  num_models, t = len(seeds), c.train
  grid, _ = build_grid(c, task, start, num_models)
  num_dev = len(task.dev["input_ids"])
  n_train = len(task.train["input_ids"])
  num_evals = t.num_steps // t.eval_every

  def per_model(index: int) -> dict:
    rows = np.stack([batch_rows(c.seed, int(s), index * t.eval_every, t.eval_every,
                                t.batch_size, n_train) for s in seeds])
    return {"learning_rate": hp["learning_rate"], "rows": rows}

  timing = {"chunks": 0, "seconds": 0.0, "last": None}

  def on_host(out: dict) -> dict:
    """The dev predictions scored: every metric per model, as float64; the time from one chunk
    to the next (the first of a call compiles: not counted)."""
    now = time.perf_counter()
    if timing["last"] is not None:
      timing["chunks"], timing["seconds"] = (timing["chunks"] + 1,
                                             timing["seconds"] + now - timing["last"])
    timing["last"] = now
    predictions = out["predictions"].reshape((num_models, -1) + out["predictions"].shape[3:])
    scores = [_score(task, predictions[m, :num_dev], bool(out["diverged"][m]))
              for m in range(num_models)]
    metrics = {name: np.array([s[name] for s in scores], np.float64) for name in task.metrics}
    return {"train_loss": out["train_loss"].astype(np.float64),
            "diverged": out["diverged"].astype(np.float64), **metrics}

  log = RunLog(workdir, total=t.num_steps, tensorboard=context.tensorboard,
               progress=context.show_progress)

  def record(indices, history):
    for index in indices:
      _record(log, c, task, (index + 1) * t.eval_every, {k: v[index] for k, v in history.items()})
      main = history[task.metrics[0]][index]
      shown = f"{np.mean(main[np.isfinite(main)]):.3f}" if np.isfinite(main).any() else "n/a"
      log.advance(t.eval_every, **{task.metrics[0]: shown})

  hooks = RunHooks(os.path.join(workdir, "checkpoints"), t.checkpoint_every, num_evals,
                   record=record, budget=context.budget, name="fine-tuning")
  try:
    finished_run = hooks.train(grid, grid_lib.model_keys(c.seed, seeds), per_model,
                               on_host=on_host)
  finally:
    log.close()
  history = finished_run.metrics
  timed_chunks, timed_seconds = timing["chunks"], timing["seconds"]
  summary = with_hybrid_weights(summarise(c, task, history), c,
                                hybrid_weights(finished_run.state.params))
  summary.update(
      encoder=start.description,
      model_steps_per_second=(num_models * t.eval_every * timed_chunks / timed_seconds
                              if timed_seconds else None),
      devices=jax.device_count(), device_kind=jax.devices()[0].device_kind)
  return FinetuneResults(history, summary)


def describe(summary: dict) -> list[str]:
  """One line per learning rate (mean, standard error, min and max over the seeds) and the
  best one."""
  main = summary["metric"]
  lines = [f"{summary['task']} on {summary['encoder']}: dev {main} after {summary['steps']} "
           f"steps, over {summary['num_seeds']} seeds"]
  for cell in summary["cells"]:
    s = cell[main]
    score = ("all diverged" if s["mean"] is None else
             f"{s['mean']:.4f} +- {s['std_error']:.4f} (min {s['min']:.4f}, max {s['max']:.4f})")
    diverged = f", {cell['diverged']} diverged" if cell["diverged"] else ""
    lines.append(f"  lr {cell['learning_rate']:.2e}: {score}{diverged}")
  if summary["best"] is not None:
    lines.append(f"  best: lr {summary['best']['learning_rate']:.2e}")
  return lines


def migrate_finetuning(tree: dict) -> dict:
  """An old fine-tuning ``config.json`` tree's flat ``encoder.attention`` as one section."""
  return with_attention_section(tree, "encoder", "attention", "attention", ("hybrid_init",))


FINETUNING = kinds.register(kinds.RunKind(
    name="finetuning",
    may_differ={"train.checkpoint_every", "task.cache_dir"},
    base_config=base_finetune_config,
    validate=validate_finetune_config,
    train=train_finetuning,
    summarise=lambda config, results: results.summary,
    save=lambda workdir, config, results: save_metrics(os.path.join(workdir, "metrics.npz"),
                                                       config, results.history),
    describe=describe,
    migrate=migrate_finetuning))


def run_finetuning(c: ml_collections.ConfigDict, workdir: str, *,
                   budget: Optional[Budget] = None, show_progress: bool = True,
                   tensorboard: bool = True, afresh: bool = False) -> dict:
  """``runs.run`` of a fine-tuning config: fine-tune (or resume) the grid and return the
  summary.

  Args:
    c: the fine-tuning config (``base_finetune_config``), validated first.
    workdir: the run's directory; a workdir of another config is refused (``WorkdirError``)
      unless ``afresh`` moves it aside, a finished one's summary is returned untouched.
    budget: the evaluations and/or minutes this call may run before ``Interrupted``
      (``Budget(chunks=...)``: a simulated kill, for tests); None: no limit.
    show_progress: show a progress bar.
    tensorboard: write TensorBoard scalars.
    afresh: move an existing workdir aside and start anew.

  Returns:
    The summary (``summarise``) with the run's throughput.
  """
  kinds.check_kind(c, FINETUNING.name)
  return runs.run(c, workdir, afresh=afresh, budget=budget, show_progress=show_progress,
                  tensorboard=tensorboard)


def save_metrics(path: str, c, history: dict) -> None:
  """``metrics.npz``: every metric's curve as ``[evaluations, learning rates, seeds]``."""
  arrays = {name: models_axis(c).unflatten(curve) for name, curve in history.items()}
  arrays["learning_rates"] = np.asarray(c.learning_rates, np.float64)
  arrays["eval_steps"] = np.arange(1, len(history["diverged"]) + 1) * c.train.eval_every
  np.savez_compressed(path, **arrays)

