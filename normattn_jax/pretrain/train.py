"""ALBERT-style pre-training (MLM + SOP) with any attention normalisation, data-parallel over
every device of every host.

The kind of run "pretraining" (``train.kinds``; ``runs.run(config, workdir)``, or
``run_pretraining``): prepares the data (``normattn_jax.data``), trains
``AlbertForPretraining`` with ALBERT's LAMB (``train.optim.albert_lamb``), evaluates on the
held-out split, and writes ``config.json``, ``history.jsonl`` (train and eval metrics),
TensorBoard scalars (``run_log.RunLog``), orbax checkpoints of the ``state.TrainState`` and
``summary.json``. The batch of step t is a pure function of (seed, t) and dropout keys are the
state's step keys, so a killed run restarted with the same command resumes from its newest
checkpoint and ends with the same numbers; the workdir belongs to its config
(``checkpoint.open_workdir``).
"""
from __future__ import annotations

import copy
import hashlib
import os
import time
from typing import Optional

import jax
import jax.numpy as jnp
import ml_collections
from ml_collections import config_dict
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from normattn_jax.attention.module import IMPLEMENTATIONS, check_fusable
from normattn_jax.attention.module_spec import AttentionModuleSpec
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.models.albert import (DTYPES, AlbertConfig, AlbertForPretraining,
                                        pretraining_loss)
from normattn_jax.models.bert import ACTIVATIONS
from normattn_jax.precision import check_compute_dtype
from normattn_jax.train import kinds, multihost, runs
from normattn_jax.train.checkpoint import check_workdir
from normattn_jax.sweep.config import validate_attention_options
from normattn_jax.train.driver import Budget, RunHooks
from normattn_jax.attention.section import with_attention_section
from normattn_jax.train.optim import albert_lamb, albert_schedule
from normattn_jax.train.run_log import RunLog, read_history
from normattn_jax.train.runs import RunContext
from normattn_jax.attention.section import attention_section, attention_spec
from normattn_jax.validation import check_known_fields
from normattn_jax.train.state import TRAIN_STREAM, TrainState
from normattn_jax.validation import (check_bool_fields, check_config_float, check_config_int,
                                     check_fields)
from normattn_jax.validation import fail_config as _fail

CORPORA = ("shakespeare", "files", "wikipedia")
EVAL_SUMS = ("mlm_correct", "mlm_weight", "mlm_nll", "sop_correct", "sop_nll", "examples")


def base_pretrain_config() -> ml_collections.ConfigDict:
  """ALBERT-large (24 layers, hidden 1024, 16 heads, E = 128) with the DNAS paper's training
  settings (batch 4096, LAMB lr 0.00176, 125k steps, 3125 warm-up steps); ``configs/albert_*.py``
  start from it."""
  c = ml_collections.ConfigDict()
  c.kind = "pretraining"  # the kind of run (train.kinds)
  c.model = ml_collections.ConfigDict(dict(
      embedding_size=128, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
      intermediate_size=4096, num_hidden_groups=1, inner_group_num=1, hidden_act="gelu_new",
      max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12,
      attention=attention_section("softmax"), dropout=0.0, dtype="float32",
      attention_implementation="auto", differential=False))
  # model.output_gate / qk_norm: None or a string (placeholders, so the command line sets them)
  c.model.output_gate = config_dict.placeholder(str)
  c.model.qk_norm = config_dict.placeholder(str)
  c.data = ml_collections.ConfigDict(dict(
      corpus="shakespeare", files=(), cache_dir="", wikipedia_config="20231101.en",
      vocab_size=30000, max_seq_length=512, masked_lm_prob=0.15, max_predictions_per_seq=20,
      ngram=3, short_seq_prob=0.1, dupe_factor=10, validation_fraction=0.05, seed=12345))
  c.train = ml_collections.ConfigDict(dict(
      batch_size=4096, num_steps=125000, learning_rate=0.00176, warmup_steps=3125,
      weight_decay=0.01, clip_norm=1.0, seed=0, log_every=100, eval_every=5000,
      eval_batches=16, eval_batch_size=0, checkpoint_every=5000, shard_parameters=False))
  return c


def validate_pretrain_config(c: ml_collections.ConfigDict) -> None:
  """Check every field before anything is built; errors name the field and the value."""
  check_known_fields(c, base_pretrain_config(), free=("model.attention.options",))
  kinds.check_kind(c, "pretraining", absent_is_expected=True)
  check_bool_fields(c, base_pretrain_config())
  spec = attention_spec(c.model.attention, "model.attention")
  for name in ("embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "intermediate_size", "num_hidden_groups", "inner_group_num",
               "max_position_embeddings", "type_vocab_size"):
    check_config_int(f"model.{name}", c.model[name])
  if c.model.hidden_size % c.model.num_attention_heads:
    _fail("model.num_attention_heads", c.model.num_attention_heads,
          f"must divide model.hidden_size ({c.model.hidden_size})")
  if c.model.num_hidden_groups > c.model.num_hidden_layers:
    _fail("model.num_hidden_groups", c.model.num_hidden_groups,
          f"must not exceed model.num_hidden_layers ({c.model.num_hidden_layers})")
  choices = {"model.hidden_act": (c.model.hidden_act, tuple(ACTIVATIONS)),
             "model.dtype": (c.model.dtype, tuple(DTYPES)),
             "model.attention_implementation": (c.model.attention_implementation,
                                                IMPLEMENTATIONS),
             "data.corpus": (c.data.corpus, CORPORA)}
  for field, (value, allowed) in choices.items():
    if value not in allowed:
      _fail(field, value, f"must be one of {allowed}")
  check_fusable(spec, c.model.attention_implementation, "config.model.attention_implementation")
  check_compute_dtype(spec, c.model.dtype, "model.dtype")
  validate_attention_options(c.model, "model")
  if c.model.differential and (c.model.hidden_size // c.model.num_attention_heads) % 2:
    _fail("model.differential", c.model.differential,
          f"splits each head in two maps: needs an even head width, model.hidden_size / "
          f"model.num_attention_heads = {c.model.hidden_size // c.model.num_attention_heads}")
  check_config_float("model.dropout", c.model.dropout, 0, 1, open_high=True)
  check_config_float("model.layer_norm_eps", c.model.layer_norm_eps, 0, open_low=True)
  if c.data.corpus == "files":
    if not c.data.files:
      _fail("data.files", c.data.files, "must list text files when data.corpus='files'")
    missing = [f for f in c.data.files if not os.path.isfile(f)]
    if missing:
      _fail("data.files", tuple(c.data.files), f"no such file(s): {missing}")
  for name in ("vocab_size", "max_seq_length", "max_predictions_per_seq", "ngram",
               "dupe_factor"):
    check_config_int(f"data.{name}", c.data[name])
  if c.data.max_seq_length > c.model.max_position_embeddings:
    _fail("data.max_seq_length", c.data.max_seq_length,
          f"must not exceed model.max_position_embeddings ({c.model.max_position_embeddings})")
  for name in ("masked_lm_prob", "short_seq_prob"):
    check_config_float(f"data.{name}", c.data[name], 0, 1)
  check_fields(c, ("data.validation_fraction",))
  if c.data.corpus == "files":
    _check_enough_documents(c.data)
  check_fields(c, ("train.batch_size", "train.num_steps", "train.log_every", "train.eval_every"))
  check_config_int("train.eval_batches", c.train.eval_batches)
  check_fields(c, ("train.warmup_steps", "train.checkpoint_every"))
  check_config_int("train.eval_batch_size", c.train.eval_batch_size, 0)
  if c.train.warmup_steps >= c.train.num_steps:
    _fail("train.warmup_steps", c.train.warmup_steps,
          f"must be below train.num_steps ({c.train.num_steps})")
  check_fields(c, ("train.learning_rate", "train.clip_norm", "train.weight_decay"))
  devices = jax.device_count()
  for name in ("batch_size", "eval_batch_size"):
    if c.train[name] % devices:
      _fail(f"train.{name}", c.train[name],
            f"must be divisible by the number of devices ({devices})")


def _check_enough_documents(d: ml_collections.ConfigDict) -> None:
  """Local text files that make too few documents for a split are refused with the config, not
  once the workdir is written (the corrected command would then be another config's)."""
  from normattn_jax.data import albert_examples, tfds_text
  need = albert_examples.DOCUMENTS_PER_SPLIT
  counts = tfds_text.split_counts([str(f) for f in d.files], albert_examples.LINES_PER_DOCUMENT,
                                  d.validation_fraction, enough=need)
  if min(counts.values()) < need:
    _fail("data.files", tuple(d.files),
          f"make {counts['train']} train and {counts['validation']} validation documents "
          f"({albert_examples.LINES_PER_DOCUMENT} non-empty lines each, data.validation_fraction="
          f"{d.validation_fraction}); ALBERT's examples need {need} in each split: add text or "
          f"change data.validation_fraction")


def file_sha256(path: str) -> str:
  """The hex sha256 of a file's bytes: identifies the vocabulary a run trained with
  (``vocab_record``), so that fine-tuning can refuse one that changed since."""
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def vocab_record(vocab_path: str, workdir: str) -> dict:
  """Which SentencePiece model the run trained with, for its ``summary.json``: its path
  relative to the workdir (a workdir moves with its own data cache) and the sha256 of the file,
  so that fine-tuning reads this one even where ``data.cache_dir`` holds other runs' too."""
  return {"path": os.path.relpath(vocab_path, workdir), "sha256": file_sha256(vocab_path)}


def model_config(c: ml_collections.ConfigDict, vocab_size: int) -> AlbertConfig:
  """The ``AlbertConfig`` of a run's ``model`` section, shared by pre-training and the
  fine-tuning encoders that load its checkpoint.

  Args:
    c: the run's config.
    vocab_size: the number of token ids (the loaded vocabulary's size).
  """
  m = c.model
  return AlbertConfig(
      vocab_size=vocab_size, embedding_size=m.embedding_size, hidden_size=m.hidden_size,
      num_hidden_layers=m.num_hidden_layers, num_attention_heads=m.num_attention_heads,
      intermediate_size=m.intermediate_size, num_hidden_groups=m.num_hidden_groups,
      inner_group_num=m.inner_group_num, hidden_act=m.hidden_act,
      max_position_embeddings=m.max_position_embeddings, type_vocab_size=m.type_vocab_size,
      layer_norm_eps=m.layer_norm_eps, attention=AttentionSpec.of(m.attention),
      attention_module=AttentionModuleSpec.from_config(m))


def build_model(c: ml_collections.ConfigDict, vocab_size: int) -> AlbertForPretraining:
  """The pre-training model of a run's config: ``model_config`` (its attention module's
  options included) with its dropout and dtype.

  Args:
    c: the run's config.
    vocab_size: the number of token ids (the loaded vocabulary's size).
  """
  return AlbertForPretraining(model_config(c, vocab_size), dropout_rate=c.model.dropout,
                              dtype=DTYPES[c.model.dtype])


def init_state(model: AlbertForPretraining, optimizer: optax.GradientTransformation,
               key: jax.Array, batch: dict) -> TrainState:
  """The state at step 0 (also, under ``jax.eval_shape``, the shapes a checkpoint restores to).

  Args:
    model: the model (``build_model``).
    optimizer: ALBERT's LAMB (``albert_lamb``).
    key: the run's key: ``fold_in(key, 0)`` initialises the parameters, ``fold_in(key, 1)``
      becomes the state's key, which the dropout keys are folded from.
    batch: a batch (any size) of the model's inputs.

  Returns:
    The ``TrainState`` with the parameters and the optimiser state.
  """
  params = model.init(jax.random.fold_in(key, 0), batch)["params"]
  return TrainState.create(apply_fn=model.apply, params=params, tx=optimizer,
                           key=jax.random.fold_in(key, 1))


def parameter_spec(shape: tuple, devices: int) -> P:
  """FSDP's layout of one array of the state: its longest axis that the devices divide split
  over "data" (each device holds a slice, gathered where a step needs it whole), else whole.

  Args:
    shape: the array's shape.
    devices: the "data" axis' size.

  Returns:
    A ``PartitionSpec``.
  """
  axes = [i for i, n in enumerate(shape) if n >= devices and n % devices == 0]
  if devices == 1 or not axes:
    return P()
  axis = max(axes, key=lambda i: (shape[i], -i))
  return P(*[("data" if i == axis else None) for i in range(len(shape))])


def state_sharding(shapes, mesh: Mesh, shard_parameters: bool):
  """The state's shardings: each parameter and optimiser moment by ``parameter_spec`` with
  ``train.shard_parameters``, else every array whole on every device (plain data parallelism).

  Args:
    shapes: the state's shapes (``jax.eval_shape`` of the init).
    mesh: the 1-D "data" mesh.
    shard_parameters: the config's ``train.shard_parameters``.

  Returns:
    A tree of ``NamedSharding`` shaped as ``shapes``.
  """
  devices = mesh.shape["data"] if shard_parameters else 1
  return jax.tree.map(lambda x: NamedSharding(mesh, parameter_spec(x.shape, devices)), shapes)


class Trainer:
  """The compiled pieces of a run: ``init``, ``train_step``, ``eval_step`` (all jitted, the
  batch sharded over the "data" axis of a mesh of every device; the state whole on every
  device, or with ``train.shard_parameters`` each array split over "data", FSDP-style:
  ``state_sharding``, known once ``init`` has run)."""

  def __init__(self, c: ml_collections.ConfigDict, vocab_size: int):
    self.config = c
    self.model = build_model(c, vocab_size)
    self.optimizer = albert_lamb(c.train.learning_rate, c.train.num_steps,
                                 c.train.warmup_steps, c.train.weight_decay, c.train.clip_norm)
    self.mesh = Mesh(np.array(jax.devices()), ("data",))
    self.replicated = NamedSharding(self.mesh, P())
    self.batch_sharding = NamedSharding(self.mesh, P("data"))
    self.state_sharding = None
    self.train_step = jax.jit(self._train_step, donate_argnums=0)
    self.eval_step = jax.jit(self._eval_step)

  def init(self, key, batch) -> TrainState:
    """The state at step 0, laid out by ``state_sharding`` (which the training step then keeps).
    """
    if self.state_sharding is None:
      self.state_sharding = state_sharding(jax.eval_shape(self._init, key, batch), self.mesh,
                                           self.config.train.shard_parameters)
      self._init_program = jax.jit(self._init, out_shardings=self.state_sharding)
      self.train_step = jax.jit(self._train_step, donate_argnums=0,
                                out_shardings=(self.state_sharding, self.replicated))
    return self._init_program(key, batch)

  def _init(self, key, batch):
    return init_state(self.model, self.optimizer, key, batch)

  def _train_step(self, state: TrainState, batch):
    def loss_fn(params):
      outputs = self.model.apply({"params": params}, batch,
                                 deterministic=self.config.model.dropout == 0,
                                 rngs={"dropout": state.step_key(TRAIN_STREAM)})
      loss, metrics = pretraining_loss(outputs, batch)
      return loss, (metrics, outputs.get("hybrid_weights"))
    (loss, (metrics, hybrid)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    metrics["grad_norm"] = optax.global_norm(grads)
    if hybrid is not None:
      metrics["hybrid_weights"] = jnp.mean(hybrid, axis=-1)  # per layer, mean over heads
    return state.apply_gradients(grads=grads, loss=loss), metrics

  def _eval_step(self, params, batch):
    outputs = self.model.apply({"params": params}, batch)
    w = batch["masked_lm_weights"].astype(jnp.float32)
    mlm_logp = jax.nn.log_softmax(outputs["mlm_logits"])
    ids, labels = batch["masked_lm_ids"], batch["sentence_order_label"]
    sop_logp = jax.nn.log_softmax(outputs["sop_logits"])
    return {
        "mlm_correct": jnp.sum(w * (jnp.argmax(mlm_logp, -1) == ids)),
        "mlm_weight": jnp.sum(w),
        "mlm_nll": -jnp.sum(w * jnp.take_along_axis(mlm_logp, ids[..., None], -1)[..., 0]),
        "sop_correct": jnp.sum(jnp.argmax(sop_logp, -1) == labels).astype(jnp.float32),
        "sop_nll": -jnp.sum(jnp.take_along_axis(sop_logp, labels[:, None], -1)),
        "examples": jnp.asarray(labels.shape[0], jnp.float32),
    }

  def global_batch(self, data, step: int, batch_size: int, seed: int) -> dict:
    """The batch of ``step`` as arrays sharded over the mesh (each host feeds its slice)."""
    local = data.batch(step, batch_size, seed=seed, process_index=jax.process_index(),
                       process_count=jax.process_count())
    return {k: jax.make_array_from_process_local_data(self.batch_sharding, v)
            for k, v in local.items()}

  def evaluate(self, params, data, step: int) -> dict:
    """Held-out MLM / SOP accuracy and losses over ``eval_batches`` fixed batches."""
    c = self.config.train
    size = c.eval_batch_size or c.batch_size
    batches = min(c.eval_batches, max(1, data.num_examples // size))
    sums = {k: 0.0 for k in EVAL_SUMS}
    for i in range(batches):
      out = self.eval_step(params, self.global_batch(data, i, size, seed=0))
      for k in EVAL_SUMS:
        sums[k] += float(out[k])
    return {"mlm_accuracy": sums["mlm_correct"] / max(sums["mlm_weight"], 1.0),
            "mlm_loss": sums["mlm_nll"] / max(sums["mlm_weight"], 1.0),
            "sop_accuracy": sums["sop_correct"] / sums["examples"],
            "sop_loss": sums["sop_nll"] / sums["examples"],
            "examples": int(sums["examples"]), "step": step}


def load_data(c: ml_collections.ConfigDict, workdir: str):
  """``(vocab, {"train", "validation"})`` of the configured corpus, cached under
  ``data.cache_dir`` (default: the workdir; runs that share it share their data)."""
  from normattn_jax import data as data_lib
  from normattn_jax.data import tfds_text

  d = c.data
  workdir = d.cache_dir or workdir
  settings = dict(vocab_size=d.vocab_size, max_seq_length=d.max_seq_length,
                  masked_lm_prob=d.masked_lm_prob,
                  max_predictions_per_seq=d.max_predictions_per_seq, ngram=d.ngram,
                  short_seq_prob=d.short_seq_prob, dupe_factor=d.dupe_factor,
                  validation_fraction=d.validation_fraction, seed=d.seed)
  try:
    if d.corpus == "wikipedia":
      return data_lib.prepare_wikipedia_pretraining_data(
          workdir, wikipedia_config=d.wikipedia_config, **settings)
    files = (data_lib.shakespeare_texts(os.path.join(workdir, "corpus"))
             if d.corpus == "shakespeare" else [str(f) for f in d.files])
    return data_lib.prepare_pretraining_data(files, workdir, **settings)
  except tfds_text.TooFewDocuments as err:
    _fail("data.validation_fraction", d.validation_fraction, too_few_documents_advice(d, err))


def too_few_documents_advice(d: ml_collections.ConfigDict, err) -> str:
  """What to change in ``data`` when a split has too few documents (``TooFewDocuments``):
  pre-training names its fields, not the data functions' arguments (its documents' length is
  not one of them)."""
  from normattn_jax.data import albert_examples, tfds_text

  fraction = f"{tfds_text.fraction_change(err.split)} data.validation_fraction"
  change = f"add text to data.files or {fraction}" if d.corpus == "files" else fraction
  return (f"{err.facts}; {change} (pre-training's documents are "
          f"{albert_examples.LINES_PER_DOCUMENT} non-empty lines of a text each)")


def throughput(summary: dict) -> str:
  """Tokens/s for printing: "n/a" when no step was timed (a call that only compiled one)."""
  rate = summary.get("tokens_per_second")
  return "n/a" if rate is None else f"{rate:.0f}"


def _to_python(tree):
  return jax.tree.map(lambda a: np.asarray(a).tolist(), tree)


def train_pretraining(c: ml_collections.ConfigDict, context: RunContext) -> dict:
  """The pre-training kind's ``train``: every step (a step is the budget's chunk), resumed from
  the newest checkpoint of the state (``RunHooks`` with ``state_only``: the history lives in
  ``history.jsonl``), then the held-out evaluation's summary."""
  # every process needs the data; the chief prepares it, the others then load its cache
  vocab, splits = multihost.chief_first("normattn_jax load_data",
                                        lambda: load_data(c, context.workdir))
  train_data, val_data = splits["train"], splits["validation"]
  trainer = Trainer(c, vocab.size)
  t = c.train

  state = trainer.init(jax.random.key(t.seed),
                       trainer.global_batch(train_data, 0, t.batch_size, t.seed))
  lr_at = albert_schedule(t.learning_rate, t.num_steps, t.warmup_steps)
  tokens_per_step = t.batch_size * c.data.max_seq_length
  timed_steps, timed_seconds = 0, 0.0
  with RunHooks(context.path("checkpoints"), t.checkpoint_every, t.num_steps,
                budget=context.budget, name="pre-training", state_only=True) as hooks:
    start, state, _ = hooks.resume(None, state, None)
    with RunLog(context.workdir, total=t.num_steps, resume_from=start, unit="step",
                tensorboard=context.tensorboard, progress=context.show_progress) as log:
      for step in range(start, t.num_steps):
        batch = trainer.global_batch(train_data, step, t.batch_size, t.seed)
        began = time.perf_counter()
        state, metrics = trainer.train_step(state, batch)
        done = step + 1
        postfix = {}
        if done % t.log_every == 0 or done == t.num_steps:
          metrics = _to_python(metrics)
          if step > start:  # the first step of a call compiles
            timed_steps += 1
            timed_seconds += time.perf_counter() - began
          log.record(done, dict(metrics, learning_rate=float(lr_at(step))), split="train")
          postfix = dict(loss=f"{metrics['loss']:.3f}", mlm=f"{metrics['mlm_accuracy']:.3f}",
                         sop=f"{metrics['sop_accuracy']:.3f}")
        elif step > start:
          jax.block_until_ready(metrics["loss"])
          timed_steps += 1
          timed_seconds += time.perf_counter() - began
        if done % t.eval_every == 0 or done == t.num_steps:
          scores = trainer.evaluate(state.params, val_data, done)
          log.record(done, {k: v for k, v in scores.items() if k != "step"}, split="validation")
        log.advance(1, **postfix)
        hooks.on_chunk(done, state, {})
      history = log.history

  final = [row for row in history if row["split"] == "validation"][-1]
  last_train = [row for row in history if row["split"] == "train"][-1]
  summary = {
      "attention": str(AttentionSpec.of(c.model.attention)),
      "steps": t.num_steps,
      "mlm_accuracy": final["mlm_accuracy"], "sop_accuracy": final["sop_accuracy"],
      "mlm_loss": final["mlm_loss"], "sop_loss": final["sop_loss"],
      "eval_examples": final["examples"],
      "train_mlm_accuracy": last_train["mlm_accuracy"],
      "train_sop_accuracy": last_train["sop_accuracy"],
      "num_params": int(sum(np.size(p) for p in jax.tree.leaves(state.params))),
      "vocab_size": vocab.size, "vocab": vocab_record(vocab.path, context.workdir),
      "train_examples": train_data.num_examples, "validation_examples": val_data.num_examples,
      "tokens_per_second": (tokens_per_step * timed_steps / timed_seconds
                            if timed_seconds else None),
      "devices": jax.device_count(), "device_kind": jax.devices()[0].device_kind,
  }
  if "hybrid_weights" in state.params["albert"]:  # HNAS's u per layer (the DNAS paper's Fig. 4)
    u = np.clip(np.asarray(state.params["albert"]["hybrid_weights"]), 0.0, 1.0)
    summary["hybrid_weights"] = np.mean(u, axis=-1).tolist()  # per layer, mean over heads
    summary["hybrid_weights_per_head"] = u.tolist()
  return summary


def describe(summary: dict) -> list[str]:
  """What the command line prints of a finished pre-training."""
  lines = [f"{summary['attention']}: held-out MLM accuracy {summary['mlm_accuracy']:.1%}, "
           f"SOP accuracy {summary['sop_accuracy']:.1%}, "
           f"{throughput(summary)} tokens/s on {summary['devices']} {summary['device_kind']}"]
  if "hybrid_weights" in summary:
    lines.append("HNAS u per layer (mean over heads): "
                 + ", ".join(f"{u:.3f}" for u in summary["hybrid_weights"]))
  return lines


PRETRAINING = kinds.register(kinds.RunKind(
    name="pretraining",
    # pre-training evaluates at the end whatever train.eval_every is
    may_differ={"train.log_every", "train.eval_every", "train.checkpoint_every",
                "data.cache_dir"},
    base_config=base_pretrain_config,
    validate=validate_pretrain_config,
    train=train_pretraining,
    describe=describe,
    divides=lambda c: (c.train.batch_size, c.train.eval_batch_size),
    added={"model.output_gate": None, "model.qk_norm": None, "model.differential": False,
           "train.shard_parameters": False},
    migrate=lambda tree: with_attention_section(tree, "model", "attention", "attention",
                                                ("hybrid_init", "sinkhorn_iters"))))


def run_pretraining(c: ml_collections.ConfigDict, workdir: str, *,
                    budget: Optional[Budget] = None, show_progress: bool = True,
                    tensorboard: bool = True, afresh: bool = False) -> dict:
  """``runs.run`` of a pre-training config: train (or resume) and return the summary;
  ``budget`` stops after its steps (``Budget(chunks=steps)``, a simulated kill, for tests) or
  minutes by raising ``Interrupted``. A finished run's summary is returned untouched; a workdir of
  another config is refused (``WorkdirError``) unless ``afresh`` moves it aside
  (``open_workdir``)."""
  kinds.check_kind(c, PRETRAINING.name)
  return runs.run(c, workdir, afresh=afresh, budget=budget, show_progress=show_progress,
                  tensorboard=tensorboard)


def pretrain_each(c: ml_collections.ConfigDict, workdir: str, attentions, *,
                  afresh: bool = False) -> dict:
  """The DNAS paper's comparison: one run of ``c`` per normalisation in ``<workdir>/<name>``, on
  the same data (``data.cache_dir``, by default ``workdir``) and seeds. Every run's workdir is
  checked before any trains, so that a workdir of another config is refused before hours of
  training (unless ``afresh`` moves each aside).

  Args:
    c: the pre-training config; its ``model.attention.name`` is set per run (on a copy).
    workdir: the comparison's folder.
    attentions: the normalisations' registered names.
    afresh: move each run's existing workdir aside and start anew.

  Returns:
    ``{name: summary}`` (``run_pretraining``).

  Raises:
    WorkdirError: for a run's workdir of another config.
  """
  c = copy.deepcopy(c)
  if not c.data.cache_dir:
    c.data.cache_dir = workdir
  if not afresh:
    for attention in attentions:
      c.model.attention.name = attention
      check_workdir(os.path.join(workdir, attention), c, "pretraining")
  results = {}
  for attention in attentions:
    c.model.attention.name = attention
    print(f"--- {attention}", flush=True)
    results[attention] = run_pretraining(c, os.path.join(workdir, attention), afresh=afresh)
  return results


def validation_rows(workdir: str) -> list[dict]:
  """The held-out evaluations of a run's ``history.jsonl``, in order."""
  return [row for row in read_history(os.path.join(workdir, "history.jsonl"))
          if row["split"] == "validation"]
