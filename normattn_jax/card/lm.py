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
from typing import Any, Callable, Mapping, Optional, Union

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


def first_token_share(weights) -> np.ndarray:
  """The share of attention on the first token, per head: for each query i >= 1,
  ``|w[i, 0]| / sum_{j <= i} |w[i, j]|`` (absolute values: some normalisations give negative or
  unnormalised weights; a row of zeros counts 0), averaged over the queries and the windows.

  Args:
    weights: ``[..., windows, heads, n, n]`` causal attention weights (query, key).

  Returns:
    float64 ``[..., heads]``.
  """
  w = np.abs(np.asarray(weights, np.float64))[..., 1:, :]
  totals = np.where(_causal(w.shape[-1])[1:], w, 0.0).sum(-1)
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


def load_corpus(cache_dir: str) -> tuple[np.ndarray, np.ndarray, int]:
  """The Shakespeare texts (``data.corpora.shakespeare_texts``, fetched once into
  ``cache_dir/corpus``) as characters.

  Each text's last ``HELDOUT_SHARE`` (5%, from the start of a line) is held out, so that every
  work is in both parts and no window crosses from one into the other; the training ids are the
  texts' beginnings one after another, the held-out ids their ends. The vocabulary is every
  character of the texts (their byte-order marks dropped), in code-point order.

  Returns:
    ``(train ids, held-out ids, vocabulary size)``, the ids int32.
  """
  from normattn_jax.data import corpora

  texts = []
  for path in corpora.shakespeare_texts(os.path.join(cache_dir, "corpus")):
    with open(path, encoding="utf-8") as f:
      texts.append(f.read().replace("\ufeff", ""))
  cuts = [_heldout_start(text) for text in texts]
  parts = ["".join(text[:c] for text, c in zip(texts, cuts)),
           "".join(text[c:] for text, c in zip(texts, cuts))]
  codes = [np.frombuffer(part.encode("utf-32-le"), np.uint32) for part in parts]
  alphabet = np.unique(np.concatenate(codes))
  train, heldout = (np.searchsorted(alphabet, c).astype(np.int32) for c in codes)
  return train, heldout, int(alphabet.size)


def _corpus_name(corpus: Optional[tuple]) -> str:
  """What the workdir's config records of the corpus: "shakespeare", or a given corpus's
  fingerprint (so that a workdir refuses another one)."""
  if corpus is None:
    return "shakespeare"
  train, heldout, vocab_size = corpus
  digest = hashlib.sha1()
  for ids in (train, heldout):
    digest.update(np.ascontiguousarray(ids, np.int32).tobytes())
  digest.update(str(int(vocab_size)).encode())
  return f"given:{digest.hexdigest()[:16]}"


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
                log: Callable = print) -> grid_lib.GridRun:
  """Train (or resume) the seeds as one grid, checkpointed in ``workdir/checkpoints``.

  Returns:
    ``GridRun``: the metrics ``{"train_loss", "diverged": [chunks, seeds]}`` and the final
    states (host arrays, a leading seeds axis).
  """
  c = engine_config(sizes, num_seeds)
  grid = build_grid(c, model, train_ids)
  chunks = sizes.num_steps // sizes.log_every
  began = time.perf_counter()

  def record(indices, metrics):
    for index in indices:
      log(f"{spec}: step {(index + 1) * sizes.log_every}/{sizes.num_steps}: loss "
          f"{np.mean(metrics['train_loss'][index]):.3f} ({time.perf_counter() - began:.0f} s)")

  hooks = RunHooks(os.path.join(workdir, "checkpoints"), max(1, chunks // CHECKPOINTS), chunks,
                   record=record, budget=budget, name=str(spec))
  return hooks.train(grid, grid_lib.model_keys(seed, np.arange(num_seeds)),
                     {"seed": np.arange(num_seeds, dtype=np.int32)}, on_host=chunk_metrics)


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
           log: Callable = print, budget: Optional[Budget] = None) -> dict:
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
    corpus: ``(train ids, held-out ids, vocabulary size)`` in place of Shakespeare (tests).
    log: where progress lines go.
    budget: the chunks (``Budget(chunks=...)``: a simulated kill, for tests) and/or minutes
      this call may run before ``Interrupted``; None: no limit.

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
  config = lm_config(spec, sizes, seed, num_seeds, _corpus_name(corpus))
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
                        budget or Budget(), log)
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
