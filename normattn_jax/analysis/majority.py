"""The majority experiment of Brody et al. (Sec. 4.1, Fig. 2, 3), as the paper ran it.

Data: 50 tokens of 20 types whose type counts are an integer partition of 50 (into at most 20
parts) with the largest part ahead of the runner-up by at least 6; 10 sequences per partition,
each with its own random assignment of types to parts; the label of every position is the
majority type; a stratified 80 / 20 train / test split. Model: one pre-LN encoder layer (d = 8,
one head, ReLU FFN of width 8, no dropout, no attention in-projection bias, logits tied to the
embedding, 584 parameters), initialised as ``torch.nn.TransformerEncoderLayer``. The LayerNorm
before attention has no gain and bias and is one of three ``VARIANTS``::

    with_projection          (x - mean) / std        centred, norm sqrt(d)
    without_projection       x / ||x|| * sqrt(d)     the paper's scaling only, norm sqrt(d)
    without_projection_code  x / ||x|| / sqrt(d)     as the authors' released code computes
                                                     it, norm 1 / sqrt(d)

The model has no positional embedding, so a sequence acts only through its type counts: every
position of one type gets the same output, and attention over 50 keys equals attention over the
20 types, each weighted by its count. ``MajorityEncoder`` computes both forms (``__call__`` on
tokens, ``from_pairs`` on the types present in each sequence); training uses the second, which
gives the same loss and gradients (up to rounding) at a fraction of the cost.

Training: Adam, learning rate 1e-3 decaying linearly to 0 over 10,000 epochs (so by about 10% in
1,000), batches of 6000 drawn as shuffled epochs of the fixed training set (the last batch of an
epoch smaller), all seeds and variants as one grid of the engine (``build_grid``, trained by
``normattn_jax.train.grid.run_grid``), the data sets shared by every model.

A run is the kind of run "majority" (``train.kinds``; ``runs.run`` or ``run``): it takes its
settings as a config (``base_config``, the paper's, which the ``layernorm_majority`` config
gives; checked by ``validate_config``), whose ``config.json`` guards its workdir as every run's
does (``train.checkpoint.open_workdir``; its target, ``steps``, may differ); it logs every
evaluation to ``history.jsonl``, resumes from its checkpoints (also for more steps than it ran)
and writes its summary to ``majority.json``.
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Callable, Iterator, NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from normattn_jax._extras import require
from normattn_jax.norms import LayerNorm, normalize
from normattn_jax.train import grid as grid_lib
from normattn_jax.train import kinds, runs
from normattn_jax.train.checkpoint import read_json
from normattn_jax.train.driver import Budget, RunHooks
from normattn_jax.train.layout import GroupSeedAxis
from normattn_jax.train.run_log import RunLog, read_history
from normattn_jax.train.runs import RunContext
from normattn_jax.train.state import TRAIN_STREAM, TrainState
from normattn_jax.validation import check_known_fields
from normattn_jax.validation import (RULES, check_config_float, check_config_int, check_fields,
                                     check_int, fail_config)

# An optional package: without it, the error names the extra that installs it.
ml_collections = require("ml_collections", "analysis")

Array = jax.Array

VARIANTS = ("with_projection", "without_projection", "without_projection_code")
# Numerically 0: added to a mean square above ~1e-12 it leaves the float32 sum unchanged, so
# the norms are those of the paper's eps = 0, while an exactly zero or constant input gives a
# finite output and gradient instead of NaN (a smaller eps overflows rsqrt's derivative).
LAYER_NORM_EPSILON = 1e-20


KIND = "majority"  # the kind of run (train.kinds)


# ---------------------------------------------------------------------------------------------
# Data


def _partitions(remaining: int, smallest: int, slots: int,
                rng: np.random.Generator) -> Iterator[tuple[int, ...]]:
  """Non-decreasing partitions of ``remaining`` into at most ``slots`` parts >= ``smallest``,
  depth first, the candidate sizes of each part in a fresh random order (so the enumeration
  order is random, but partitions that share their small parts come together)."""
  if remaining == 0:
    yield ()
    return
  if slots == 1:
    if remaining >= smallest:
      yield (remaining,)
    return
  sizes = np.arange(smallest, remaining + 1)
  rng.shuffle(sizes)
  for size in sizes.tolist():
    for rest in _partitions(remaining - size, size, slots - 1, rng):
      yield (size,) + rest


def _check_positive(**fields) -> None:
  """Raise naming the first field that is not a positive integer."""
  for name, value in fields.items():
    check_int(name, value)


def majority_counts(seed: int | np.random.SeedSequence, num_samples: int = 100_000,
                    seq_len: int = 50, num_types: int = 20, min_lead: int = 6,
                    per_partition: int = 10) -> tuple[np.ndarray, np.ndarray]:
  """The paper's majority sequences as type counts.

  Partitions of ``seq_len`` are enumerated depth first in random order; each whose largest part
  leads the runner-up by at least ``min_lead`` gives ``per_partition`` sequences, each assigning
  a random permutation of the types to the parts, until there are more than ``num_samples``.

  Args:
    seed: seeds numpy's generator.
    num_samples: the sequences wanted; the result has the next multiple of ``per_partition``
      above it.
    seq_len: tokens per sequence.
    num_types: token types (and classes).
    min_lead: the least lead of the majority type over the runner-up.
    per_partition: sequences drawn from each partition.

  Returns:
    ``(counts, labels)``: int8 [n, num_types] tokens of each type, int32 [n] the majority type.
  """
  _check_positive(num_samples=num_samples, seq_len=seq_len, min_lead=min_lead,
                  per_partition=per_partition)
  if not (isinstance(num_types, (int, np.integer)) and 2 <= num_types <= 127):
    raise ValueError(f"num_types must be an integer in [2, 127], got {num_types!r}")
  if seq_len > 127:
    raise ValueError(f"seq_len must be at most 127 (counts are int8), got {seq_len!r}")
  rng = np.random.default_rng(seed)
  wanted = num_samples // per_partition + 1
  kept = []
  for parts in _partitions(seq_len, 1, min(seq_len, num_types), rng):
    if len(parts) >= 2 and parts[-1] - parts[-2] >= min_lead:
      kept.append(parts)
      if len(kept) == wanted:
        break
  if len(kept) < wanted:
    raise ValueError(f"min_lead={min_lead}: only {len(kept)} partitions of seq_len={seq_len} "
                     f"qualify, fewer than num_samples/per_partition={wanted}")
  sizes = np.zeros((wanted, num_types), np.int8)  # each partition's parts, then zeros
  for i, parts in enumerate(kept):
    sizes[i, :len(parts)] = parts
  sizes = np.repeat(sizes, per_partition, axis=0)
  num_parts = np.repeat([len(parts) for parts in kept], per_partition)
  # Row r gives its j-th part to type types[r, j]: a random permutation per sequence.
  types = rng.permuted(np.broadcast_to(np.arange(num_types), sizes.shape), axis=1)
  counts = np.zeros_like(sizes)
  np.put_along_axis(counts, types, sizes, axis=1)
  labels = types[np.arange(len(types)), num_parts - 1].astype(np.int32)  # the largest part
  return counts, labels


def counts_to_tokens(counts: np.ndarray) -> np.ndarray:
  """Token sequences [n, seq_len] with the given type counts (type order; order is irrelevant
  to a model without positions)."""
  types = np.arange(counts.shape[-1])
  return np.stack([np.repeat(types, row) for row in np.asarray(counts, np.int64)])


def stratified_split(labels: np.ndarray, test_fraction: float,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """Indices ``(train, test)``: ``floor(n * test_fraction)`` test samples, each label's share
  of them within one of its share of all samples.

  Args:
    labels: [n] class of each sample.
    test_fraction: in (0, 1).
    rng: numpy generator.

  Returns:
    Two sorted index arrays that partition ``range(n)``.
  """
  if not 0 < test_fraction < 1:
    raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
  order = rng.permutation(len(labels))
  order = order[np.argsort(labels[order], kind="stable")]  # grouped by label, shuffled within
  position = np.arange(len(labels))
  is_test = np.floor((position + 1) * test_fraction) > np.floor(position * test_fraction)
  return np.sort(order[~is_test]), np.sort(order[is_test])


# ---------------------------------------------------------------------------------------------
# Model


def _symmetric_uniform(bound: float) -> Callable:
  """U(-bound, bound), torch's initialiser of linear layers."""
  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)
  return init


def pre_attention_norm(x: Array, variant: Array | int) -> Array:
  """The LayerNorm before attention, without gain and bias, of ``VARIANTS[variant]`` (an int,
  traced or not). All three are computed, so that one program serves every variant.

  Args:
    x: [..., d] inputs.
    variant: index into ``VARIANTS``.

  Returns:
    [..., d] the normalised inputs.
  """
  d = x.shape[-1]
  scaled = normalize(x, "no_projection", LAYER_NORM_EPSILON)  # x / ||x|| * sqrt(d)
  candidates = jnp.stack([normalize(x, "standard", LAYER_NORM_EPSILON), scaled, scaled / d])
  return candidates[variant]


class Pairs(NamedTuple):
  """The (sequence, type) pairs of a batch whose type is present, padded to a fixed capacity:
  the sequence's row in the batch, the type, its count (0 for padding); ``overflow`` counts
  present pairs beyond the capacity (dropped; the caller treats any as an error)."""
  sequence: Array
  types: Array
  counts: Array
  overflow: Array


def present_pairs(counts: Array, capacity: int) -> Pairs:
  """The pairs of ``counts`` [batch, types] with a count > 0, in row-major order.

  Args:
    counts: [batch, types] tokens of each type per sequence (rows of 0 are padding).
    capacity: the static number of pairs returned.

  Returns:
    ``Pairs`` of [capacity] arrays.
  """
  num_types = counts.shape[-1]
  present = (counts > 0).ravel()
  flat = jnp.nonzero(present, size=capacity, fill_value=0)[0]
  total = present.sum()
  kept = jnp.where(jnp.arange(capacity) < total, counts.ravel()[flat], 0)
  return Pairs(flat // num_types, flat % num_types, kept.astype(counts.dtype),
               jnp.maximum(total - capacity, 0))


class MajorityEncoder(nn.Module):
  """One pre-LN encoder layer whose logits are the final hidden states times the embedding.

  ``__call__`` takes tokens [batch, N] and returns logits [batch, N, num_types]; ``from_pairs``
  takes type counts [batch, num_types] and the present pairs, and returns the logits of a
  position of each pair's type in its sequence, [pairs, num_types].
  """
  num_types: int = 20
  d_model: int = 8
  ffn_features: int = 8

  def setup(self):
    """Build the layers, initialised as ``torch.nn.TransformerEncoderLayer`` initialises them."""
    d, f = self.d_model, self.ffn_features
    in_projection = _symmetric_uniform(math.sqrt(6 / (d + 3 * d)))  # xavier on the [3d, d] W
    self.embedding = nn.Embed(self.num_types, d, embedding_init=nn.initializers.normal(1.0))
    self.query = nn.Dense(d, use_bias=False, kernel_init=in_projection)
    self.key = nn.Dense(d, use_bias=False, kernel_init=in_projection)
    self.value = nn.Dense(d, use_bias=False, kernel_init=in_projection)
    self.attention_out = nn.Dense(d, kernel_init=_symmetric_uniform(1 / math.sqrt(d)),
                                  bias_init=nn.initializers.zeros)
    self.ffn_norm = LayerNorm(kind="standard", epsilon=LAYER_NORM_EPSILON)
    self.ffn_in = nn.Dense(f, kernel_init=_symmetric_uniform(1 / math.sqrt(d)),
                           bias_init=_symmetric_uniform(1 / math.sqrt(d)))
    self.ffn_out = nn.Dense(d, kernel_init=_symmetric_uniform(1 / math.sqrt(f)),
                            bias_init=_symmetric_uniform(1 / math.sqrt(f)))

  def __call__(self, tokens: Array, variant: Array | int) -> Array:
    x = self.embedding(tokens)
    h = pre_attention_norm(x, variant)
    scores = self.query(h) @ jnp.swapaxes(self.key(h), -1, -2) / math.sqrt(self.d_model)
    x = x + self.attention_out(jax.nn.softmax(scores, axis=-1) @ self.value(h))
    return self._ffn_and_logits(x)

  def from_pairs(self, counts: Array, pairs: Pairs, variant: Array | int) -> Array:
    """Attention of a type-t query over a sequence weighs type u by c_u exp(s_tu): with the
    scores' rows shifted by their maximum, its numerator and denominator are two products of
    the counts with [types, ...] tables, so no [batch, types, types] array is formed. (Were
    every present type's score below its row's maximum by more than float32's exp range, ~87,
    the denominator would be 0 and the loss not finite, which sets the state's ``diverged``.)"""
    table = self.embedding.embedding
    num_types, d = table.shape
    h = pre_attention_norm(table, variant)
    scores = self.query(h) @ self.key(h).T / math.sqrt(d)  # [t, u]
    weights = jnp.exp(scores - scores.max(-1, keepdims=True))
    weighted_values = (weights[:, :, None] * self.value(h)).transpose(1, 0, 2)  # [u, t, d]
    numerator = counts @ weighted_values.reshape(num_types, num_types * d)  # [batch, t * d]
    denominator = counts @ weights.T  # [batch, t]
    flat = pairs.sequence * num_types + pairs.types
    attended = numerator.reshape(-1, d)[flat] / denominator.reshape(-1)[flat][:, None]
    return self._ffn_and_logits(table[pairs.types] + self.attention_out(attended))

  def _ffn_and_logits(self, x: Array) -> Array:
    x = x + self.ffn_out(jax.nn.relu(self.ffn_in(self.ffn_norm(x))))
    return self.embedding.attend(x)

  def effective_queries(self, variant: Array | int) -> Array:
    """[types, d]: ``norm(e_t) W_Q W_K^T / sqrt(d)``, the vector each type's query dots with
    the normalised keys (``qQK`` of the paper's code)."""
    h = pre_attention_norm(self.embedding.embedding, variant)
    return (h @ self.query.variables["params"]["kernel"]
            @ self.key.variables["params"]["kernel"].T / math.sqrt(self.d_model))


def query_angles(queries: Array) -> Array:
  """Degrees in [0, 90] between each query [..., d] and the all-ones line (the angle to the
  ones vector folded at 90, as the paper measures it)."""
  d = queries.shape[-1]
  norm = jnp.maximum(jnp.linalg.norm(queries, axis=-1), jnp.finfo(queries.dtype).tiny)
  cosine = jnp.abs(queries.sum(-1)) / (norm * math.sqrt(d))
  return jnp.degrees(jnp.arccos(jnp.clip(cosine, 0.0, 1.0)))


def pair_sums(logits: Array, pairs: Pairs, labels: Array) -> tuple[Array, Array]:
  """Token-weighted sums over the pairs of the cross-entropy and of the correct predictions;
  divided by the tokens (``pairs.counts.sum()``) they are the per-token means.

  Args:
    logits: [pairs, classes] from ``from_pairs``.
    pairs: the batch's ``Pairs``.
    labels: [batch] the majority type of each sequence.

  Returns:
    ``(loss_sum, correct_sum)``, scalars.
  """
  targets = labels[pairs.sequence]
  nll = jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, targets[:, None], -1)[:, 0]
  correct = (jnp.argmax(logits, -1) == targets).astype(pairs.counts.dtype)
  return (nll * pairs.counts).sum(), (correct * pairs.counts).sum()


# ---------------------------------------------------------------------------------------------
# Configuration and data sets


def base_config() -> ml_collections.ConfigDict:
  """Every field that fixes the results of a run, at the paper's values
  (``normattn_jax/configs/layernorm_majority.py``); a config holds these fields and no others."""
  return ml_collections.ConfigDict({
      "kind": KIND,  # the kind of run (train.kinds)
      "steps": 14_000,  # the target, rounded up to whole evaluation intervals; it may grow
      "variants": VARIANTS,
      "num_seeds": 10,
      "num_samples": 100_000,
      "seq_len": 50,
      "num_types": 20,
      "min_lead": 6,
      "per_partition": 10,
      "test_fraction": 0.2,
      "d_model": 8,
      "ffn_features": 8,
      "batch_size": 6000,
      "learning_rate": 1e-3,
      "decay_epochs": 10_000,    # the rate reaches 0 after this many epochs
      "eval_every_epochs": 2,
      "eval_block": 2000,        # test sequences evaluated at once (memory, not results)
      "models_per_vmap": 0,      # 0: auto, as everywhere (grid.models_per_vmap): 1 on a CPU
      "seed": 0,
  })


# Fields whose rule is a sweep's field of another name (validation.RULES): {field: rule's key}.
_SHARED_RULES = {"batch_size": "train.batch_size", "learning_rate": "train.learning_rate",
                 "models_per_vmap": "train.models_per_vmap"}
_POSITIVE = ("num_samples", "seq_len", "min_lead", "per_partition", "d_model", "ffn_features",
             "decay_epochs", "eval_every_epochs", "eval_block")


def validate_config(c: ml_collections.ConfigDict) -> None:
  """Check every field before anything is written or compiled.

  Raises:
    ValueError: ``config.<field>=<value>: <why>`` for the first field that is unknown or breaks
      its rule.
  """
  check_known_fields(c, base_config())
  kinds.check_kind(c, KIND, absent_is_expected=True)
  check_fields(c, ("num_seeds", "seed"))
  for field, rule in _SHARED_RULES.items():
    RULES[rule].check(field, c[field])
  for field in _POSITIVE + ("steps",):
    check_config_int(field, c[field])
  variants = c.variants
  if (not isinstance(variants, (tuple, list)) or not variants
      or any(v not in VARIANTS for v in variants) or len(set(variants)) != len(variants)):
    fail_config("variants", variants, f"must be distinct names from {VARIANTS}")
  check_config_int("num_types", c.num_types, low=2)
  if c.num_types > 127:
    fail_config("num_types", c.num_types, "must be at most 127 (counts are int8)")
  if c.seq_len > 127:
    fail_config("seq_len", c.seq_len, "must be at most 127 (counts are int8)")
  check_config_float("test_fraction", c.test_fraction, 0, 1, open_low=True, open_high=True)
  if c.models_per_vmap and num_models(c) % c.models_per_vmap:
    fail_config("models_per_vmap", c.models_per_vmap,
                f"must divide the number of models, {num_models(c)} (variants x seeds)")


def num_models(c: ml_collections.ConfigDict) -> int:
  """The grid's size: one model per variant and seed (``len(variants) * num_seeds``)."""
  return len(c.variants) * c.num_seeds


def models_axis(c: ml_collections.ConfigDict) -> GroupSeedAxis:
  """The models axis: variant x seed, seed innermost (``train.layout``)."""
  return GroupSeedAxis(len(c.variants), c.num_seeds)


def model_variants(c: ml_collections.ConfigDict) -> np.ndarray:
  """[models] index into ``VARIANTS`` of each model."""
  return np.asarray([VARIANTS.index(v) for v in c.variants], np.int32)[
      models_axis(c).group_indices()]


def model_seeds(c: ml_collections.ConfigDict) -> np.ndarray:
  """[models] the seed (data set and initialisation) of each model: variants share them."""
  return models_axis(c).seed_indices()


class MajorityData(NamedTuple):
  """Per seed [seeds, ...]: the training and test sets (type counts and labels) and the test
  set's share of tokens of each type (the weights of the mean query angle)."""
  train_counts: np.ndarray
  train_labels: np.ndarray
  test_counts: np.ndarray
  test_labels: np.ndarray
  test_type_share: np.ndarray


def build_data(config: ml_collections.ConfigDict) -> MajorityData:
  """A data set and stratified split per seed (numpy, seeded by ``config.seed`` and the seed).

  Args:
    config: the run's configuration.

  Returns:
    ``MajorityData`` of numpy arrays.
  """
  parts = {name: [] for name in MajorityData._fields}
  for seed in range(config.num_seeds):
    data_seed = np.random.SeedSequence([config.seed, seed])
    counts, labels = majority_counts(data_seed, config.num_samples, config.seq_len,
                                     config.num_types, config.min_lead, config.per_partition)
    train, test = stratified_split(labels, config.test_fraction,
                                   np.random.default_rng(data_seed.spawn(1)[0]))
    share = counts[test].sum(0, dtype=np.float64) / counts[test].sum()
    for name, value in zip(MajorityData._fields, (counts[train], labels[train], counts[test],
                                                  labels[test], share.astype(np.float32))):
      parts[name].append(value)
  return MajorityData(*(np.stack(parts[name]) for name in MajorityData._fields))


def data_statistics(counts: np.ndarray) -> dict:
  """Mean types per sequence and mean count of the majority type, over all sequences and per
  data set (each seed draws its own partitions, so the data sets differ).

  Args:
    counts: type counts ``[n, types]`` of one data set or ``[seeds, n, types]``.

  Returns:
    ``types_per_sequence`` and ``majority_count`` (means over every sequence), and the same per
    data set as ``..._per_data_set`` lists.
  """
  counts = np.asarray(counts)
  per_set = counts.reshape((-1,) + counts.shape[-2:])
  types, majority = (per_set > 0).sum(-1), per_set.max(-1)
  return {"types_per_sequence": float(types.mean()), "majority_count": float(majority.mean()),
          "types_per_sequence_per_data_set": types.mean(-1).tolist(),
          "majority_count_per_data_set": majority.mean(-1).tolist()}


def train_pair_capacity(counts: np.ndarray, batch_size: int) -> int:
  """Room for the present pairs of a batch of ``batch_size`` sequences drawn from one seed's
  ``counts`` [seeds, n, types]: the largest over seeds of the mean plus 10 standard deviations of
  such a sum, rounded up to 128 (so a batch that does not fit is never seen in practice; the
  programs report one if it is)."""
  present = (np.asarray(counts) > 0).sum(-1).reshape(-1, counts.shape[-2])
  room = batch_size * present.mean(-1) + 10 * present.std(-1) * math.sqrt(batch_size)
  return int(min(-(-room.max() // 128) * 128, batch_size * counts.shape[-1]))


def _blocks(counts: np.ndarray, block: int) -> int:
  return -(-counts.shape[-2] // block)


def eval_pair_capacity(counts: np.ndarray, block: int) -> int:
  """The most present pairs in any block of ``block`` test sequences of any seed (exact)."""
  present = (np.asarray(counts) > 0).sum(-1)  # [seeds, n]
  pad = _blocks(counts, block) * block - present.shape[-1]
  present = np.pad(present, ((0, 0), (0, pad)))
  return int(present.reshape(present.shape[0], -1, block).sum(-1).max())


# ---------------------------------------------------------------------------------------------
# Training


class MajorityPrograms(NamedTuple):
  """The programs of ONE model, for ``grid.Grid.of``: ``init(key data, per_model, data) -> state``,
  ``chunk(state, per_model, data) -> (state, metrics)`` (``eval_every_epochs`` epochs, then the
  evaluation) and ``evaluate(state, per_model, data) -> metrics``; ``per_model`` is the model's
  ``{"variant", "seed"}`` (``per_model_settings``), ``data`` the run's ``MajorityData``."""
  model: MajorityEncoder
  steps_per_epoch: int
  init: Callable
  chunk: Callable
  evaluate: Callable


def steps_per_epoch(config: ml_collections.ConfigDict, train_size: int) -> int:
  """Batches per epoch of ``train_size`` examples, the last one possibly smaller (ceil)."""
  return -(-train_size // config.batch_size)


def learning_rate_schedule(config: ml_collections.ConfigDict, train_size: int) -> optax.Schedule:
  """The rate, decaying linearly to 0 over ``decay_epochs`` epochs."""
  decay_steps = config.decay_epochs * steps_per_epoch(config, train_size)
  return optax.linear_schedule(config.learning_rate, 0.0, decay_steps)


def make_optimizer(config: ml_collections.ConfigDict,
                   train_size: int) -> optax.GradientTransformation:
  """Adam (torch's defaults are optax's) with ``learning_rate_schedule``."""
  return optax.adam(learning_rate_schedule(config, train_size))


def per_model_settings(config: ml_collections.ConfigDict) -> dict:
  """Each model's ``{"variant": index into VARIANTS, "seed": its data set}``, int32 [models]."""
  return {"variant": model_variants(config), "seed": model_seeds(config)}


def model_keys(config: ml_collections.ConfigDict) -> np.ndarray:
  """Raw key data per model; a seed's models (one per variant) share their key, so they start
  from the same parameters and see the same batches."""
  return grid_lib.model_keys(config.seed, model_seeds(config))


def make_programs(config: ml_collections.ConfigDict, data: MajorityData) -> MajorityPrograms:
  """The programs of one model of a run on ``data`` (whose shapes fix the batching and
  capacities).

  Args:
    config: the run's configuration.
    data: its ``build_data``.

  Returns:
    ``MajorityPrograms``.
  """
  model = MajorityEncoder(config.num_types, config.d_model, config.ffn_features)
  train_size = data.train_counts.shape[1]
  tx = make_optimizer(config, train_size)
  per_epoch = steps_per_epoch(config, train_size)
  padded = per_epoch * config.batch_size
  train_capacity = train_pair_capacity(data.train_counts, config.batch_size)
  eval_capacity = eval_pair_capacity(data.test_counts, config.eval_block)

  def init(key, settings, data):
    del settings, data  # a seed's variants start alike, whatever the data
    tokens = jnp.zeros((1, config.seq_len), jnp.int32)
    params = model.init(jax.random.fold_in(jax.random.wrap_key_data(key), 2), tokens, 0)
    return TrainState.create(apply_fn=model.apply, params=params, tx=tx, key=key)

  def sums(params, counts, labels, variant, capacity):
    pairs = present_pairs(counts, capacity)
    logits = model.apply(params, counts, pairs, variant, method=MajorityEncoder.from_pairs)
    return pair_sums(logits, pairs, labels), pairs.overflow

  def batch_loss(params, counts, labels, variant):
    (loss_sum, _), overflow = sums(params, counts, labels, variant, train_capacity)
    return loss_sum / counts.sum(), overflow

  def train_step(settings, data, state, batch):
    indices, real = batch
    seed = settings["seed"]
    counts = data.train_counts[seed, indices].astype(jnp.float32) * real[:, None]
    (loss, overflow), grads = jax.value_and_grad(batch_loss, has_aux=True)(
        state.params, counts, data.train_labels[seed, indices], settings["variant"])
    return state.apply_gradients(grads=grads, loss=loss), (loss * real.sum(), overflow)

  def epoch(settings, data, state, _):
    order = jax.random.permutation(state.step_key(TRAIN_STREAM), train_size)
    indices = jnp.zeros(padded, jnp.int32).at[:train_size].set(order)
    real = (jnp.arange(padded) < train_size).astype(jnp.float32)
    batches = (indices.reshape(per_epoch, -1), real.reshape(per_epoch, -1))
    state, (loss_sums, overflow) = jax.lax.scan(
        lambda s, b: train_step(settings, data, s, b), state, batches)
    return state, (loss_sums.sum() / train_size, overflow.max())

  def evaluate(state, settings, data):
    seed, variant = settings["seed"], settings["variant"]
    counts, labels = data.test_counts[seed], data.test_labels[seed]
    pad = _blocks(counts, config.eval_block) * config.eval_block - counts.shape[0]
    counts = jnp.pad(counts, ((0, pad), (0, 0))).astype(jnp.float32)  # padding: no tokens
    blocks = (counts.reshape(-1, config.eval_block, counts.shape[-1]),
              jnp.pad(labels, (0, pad)).reshape(-1, config.eval_block))
    block_sums = lambda b: sums(state.params, b[0], b[1], variant, eval_capacity)
    (loss_sums, correct), overflow = jax.lax.map(block_sums, blocks)
    queries = model.apply(state.params, variant, method=MajorityEncoder.effective_queries)
    tokens = counts.sum()
    return {"test_loss": loss_sums.sum() / tokens, "test_accuracy": correct.sum() / tokens,
            "query_angle": (query_angles(queries) * data.test_type_share[seed]).sum(),
            "overflow": overflow.max()}

  def chunk(state, settings, data):
    state, (losses, overflow) = jax.lax.scan(lambda s, e: epoch(settings, data, s, e), state,
                                             None, length=config.eval_every_epochs)
    metrics = evaluate(state, settings, data)
    return state, metrics | {"train_loss": losses.mean(), "diverged": state.diverged,
                             "overflow": jnp.maximum(metrics["overflow"], overflow.max())}

  return MajorityPrograms(model, per_epoch, init, chunk, evaluate)


def build_grid(config: ml_collections.ConfigDict,
               data: MajorityData) -> tuple[grid_lib.Grid, MajorityPrograms]:
  """Every variant and seed of a run as one grid of the engine (``grid.Grid.of``), the data
  shared by all models; train it with ``grid.run_grid(grid, model_keys(config),
  per_model_settings(config), chunks)``.

  Args:
    config: the run's configuration.
    data: its ``build_data``.

  Returns:
    ``(grid, programs)``: the compiled grid and the programs of one model it was built from,
    its vmaps ``models_per_vmap`` wide (0: the engine's auto width, ``grid.models_per_vmap``).
  """
  programs = make_programs(config, data)

  settings = {"variant": jax.ShapeDtypeStruct((), jnp.int32),
              "seed": jax.ShapeDtypeStruct((), jnp.int32)}
  grid = grid_lib.Grid.of(programs.init, programs.chunk, num_models(config),
                          config.models_per_vmap, (data,), per_model=settings)
  return grid, programs


# ---------------------------------------------------------------------------------------------
# A run: its config, workdir, history and summary

SUMMARY = "majority.json"  # not summary.json: a run may be resumed for more steps
THRESHOLDS = (0.5, 0.7, 0.8, 0.9)
PAPER_STEPS = 17_000
METRICS = ("train_loss", "test_loss", "test_accuracy", "query_angle")


def checked(metrics: dict) -> dict:
  """The metrics as numpy, without ``overflow``, which must be 0 (else the losses are wrong)."""
  metrics = {k: np.asarray(v) for k, v in metrics.items()}
  if metrics.pop("overflow").max() > 0:
    raise RuntimeError("a batch held more (sequence, type) pairs than its capacity; raise the "
                       "margin of majority.train_pair_capacity")
  return metrics


def rounded(metrics: dict) -> dict:
  """Per-model lists, 6 significant digits (the history's size)."""
  return {k: [float(f"{x:.6g}") for x in np.asarray(v, np.float64)] for k, v in metrics.items()}


def curves(history: list[dict], config: ml_collections.ConfigDict) -> dict:
  """``{variant: {metric: [evals, seeds]}}`` and the evaluation steps, from the history."""
  rows = sorted(history, key=lambda r: r["step"])
  steps = np.array([r["step"] for r in rows])
  out = {}
  for v, name in enumerate(config.variants):
    columns = models_axis(config).rows(v)
    out[name] = {m: np.array([r[m][columns] if m in r else [np.nan] * config.num_seeds
                              for r in rows], np.float64) for m in METRICS}
  return {"steps": steps, "variants": out}


def first_step(steps: np.ndarray, values: np.ndarray, threshold: float):
  """Per seed, the first evaluation step at which ``values`` [evals, seeds] >= threshold."""
  reached = values >= threshold
  return [int(steps[np.argmax(col)]) if col.any() else None for col in reached.T]


def summarise(history: list[dict], config: ml_collections.ConfigDict, extra: dict) -> dict:
  """Per variant: the steps to each accuracy of ``THRESHOLDS`` and the last evaluation."""
  c = curves(history, config)
  steps = c["steps"]
  summary = {"steps_run": int(steps[-1]), "paper_steps": PAPER_STEPS} | extra
  variants = {}
  for name, m in c["variants"].items():
    accuracy = m["test_accuracy"]
    to = {}
    for threshold in THRESHOLDS:
      per_seed = first_step(steps, accuracy, threshold)
      hit = [s for s in per_seed if s is not None]
      to[str(threshold)] = {"per_seed": per_seed, "reached": len(hit), "of": len(per_seed),
                            "mean_over_reached": float(np.mean(hit)) if hit else None,
                            "seed_mean_curve": first_step(steps, accuracy.mean(1, keepdims=True),
                                                          threshold)[0]}
    final = {k: {"mean": float(v[-1].mean()), "min": float(v[-1].min()),
                 "max": float(v[-1].max())} for k, v in m.items()}
    variants[name] = {"steps_to_test_accuracy": to, "final": final}
  summary["variants"] = variants
  if {"with_projection", "without_projection"} <= variants.keys():
    summary["without_over_with_steps"] = _ratios(variants, "without_projection")
  if {"with_projection", "without_projection_code"} <= variants.keys():
    summary["without_code_over_with_steps"] = _ratios(variants, "without_projection_code")
  return summary


def _ratios(variants: dict, other: str) -> dict:
  """Steps to each accuracy of ``other`` over those of with_projection (seeds' mean curves)."""
  out = {}
  for threshold in map(str, THRESHOLDS):
    a = variants["with_projection"]["steps_to_test_accuracy"][threshold]["seed_mean_curve"]
    b = variants[other]["steps_to_test_accuracy"][threshold]["seed_mean_curve"]
    out[threshold] = b / a if a and b else None
  return out


def _stored(workdir: str, field: str):
  """A field of the workdir's previous summary (None without one)."""
  try:
    with open(os.path.join(workdir, SUMMARY)) as f:
      return json.load(f).get(field)
  except (OSError, ValueError):
    return None


class MajorityResults(NamedTuple):
  """What the majority kind's ``train`` gives its summary: the history's rows so far and the
  run's data statistics and speed."""
  history: list
  extra: dict


def train_majority(config: ml_collections.ConfigDict, context: RunContext) -> MajorityResults:
  """The majority kind's ``train``: every variant and seed to ``config.steps`` (rounded up to
  whole evaluation intervals), resumed from the newest checkpoint of the states (``RunHooks``
  with ``state_only``: the curves are ``history.jsonl``'s; ``may_grow``: a later call may ask
  for more steps), each evaluation logged as one row of every model's metrics."""
  data = build_data(config)
  grid, programs = build_grid(config, data)
  chunk_steps = config.eval_every_epochs * programs.steps_per_epoch
  target = math.ceil(config.steps / chunk_steps)
  statistics = data_statistics(data.train_counts)
  speed, tick = [], [0.0]  # model-steps/s of each chunk, and when the last one ended
  history = None
  log = context.log

  def on_resume(grid, done, states, settings):
    nonlocal history
    history = RunLog(context.workdir, resume_from=done * chunk_steps, tensorboard=False,
                     progress=False)
    if not history.rows():
      before = grid.program(programs.evaluate)(states, settings)
      history.record(0, rounded(checked({k: grid_lib.to_host(v)[:num_models(config)]
                                         for k, v in before.items()})))
    log(f"data: {data.train_counts.shape[1]} train / {data.test_counts.shape[1]} test "
        f"sequences per seed, {statistics}; {num_models(config)} models; from step "
        f"{done * chunk_steps} to {target * chunk_steps}")
    tick[0] = time.time()

  def record(indices, metrics_so_far):  # each chunk as it ends (a resume replays none)
    for index in indices:
      metrics = checked({k: v[index] for k, v in metrics_so_far.items()})
      step = (index + 1) * chunk_steps
      history.record(step, rounded(metrics))
      now = time.time()
      speed.append(num_models(config) * chunk_steps / (now - tick[0]))
      tick[0] = now
      accuracy = metrics["test_accuracy"].reshape(len(config.variants), -1).mean(1)
      log(f"step {step}: test accuracy " + ", ".join(
          f"{n} {a:.3f}" for n, a in zip(config.variants, accuracy))
          + f"; {speed[-1]:.1f} model-steps/s")

  hooks = RunHooks(context.path("checkpoints"), 1, target, record=record, on_resume=on_resume,
                   budget=context.budget, name=KIND, state_only=True, may_grow=True)
  try:
    hooks.train(grid, model_keys(config), per_model_settings(config))
  finally:
    if history is not None:
      history.close()
  extra = {"data": statistics | {"train_size": int(data.train_counts.shape[1]),
                                 "test_size": int(data.test_counts.shape[1])},
           "eval_every_steps": chunk_steps,
           "diverged_models": int(sum(np.asarray(history.history[-1].get("diverged", [0])))),
           "model_steps_per_second_last_part": (float(np.median(speed)) if speed
                                                else _stored(context.workdir,
                                                             "model_steps_per_second_"
                                                             "last_part"))}
  return MajorityResults(history.history, extra)


def read_curves(workdir: str) -> dict:
  """The curves (``curves``) of a run's workdir: its ``history.jsonl`` by its ``config.json``."""
  config = ml_collections.ConfigDict(read_json(os.path.join(workdir, "config.json")))
  return curves(read_history(os.path.join(workdir, "history.jsonl")), config)


def describe(summary: dict) -> list[str]:
  """The summary without its per-variant details."""
  return [json.dumps({k: summary[k] for k in summary if k != "variants"}, indent=1)]


def run(config: ml_collections.ConfigDict, workdir: str, *, budget: Optional[Budget] = None,
        afresh: bool = False, log: Callable = print) -> tuple[dict, dict]:
  """``runs.run`` of a majority config: train (or resume) every variant and seed to its
  ``steps`` field (rounded up to whole evaluation intervals), logging every evaluation to
  ``history.jsonl``, and write its summary to ``majority.json``.

  The workdir is the run's (``train.checkpoint.open_workdir``): one of another config is
  refused unless ``afresh`` moves it aside; ``steps`` may grow between parts of a run.

  Args:
    config: the run's config (``base_config`` with overrides).
    workdir: its folder: config.json, versions.json, history.jsonl, checkpoints/, majority.json.
    budget: the evaluation intervals and/or minutes this call may run (``Budget``) before
      ``Interrupted``, its checkpoint written; the run resumes when started again.
    afresh: move an existing workdir aside first.
    log: where progress lines go.

  Returns:
    ``(summary, curves)``: the summary (``summarise``, as ``majority.json`` holds it) and the
    curves of every evaluation so far (``curves``).

  Raises:
    ValueError: for a bad config field, before anything is written.
    WorkdirError: for a workdir of another config.
    Interrupted: when the budget stops the run.
  """
  kinds.check_kind(config, KIND)
  summary = runs.run(config, workdir, afresh=afresh, budget=budget, show_progress=False,
                     tensorboard=False, log=log)
  return summary, read_curves(workdir)


# Every field of its config but its target (steps) fixes the results; its summary is
# majority.json, so that a workdir never reads as finished: a later call may train it further.
MAJORITY = kinds.register(kinds.RunKind(
    name=KIND,
    may_differ={"steps"},
    base_config=base_config,
    validate=validate_config,
    train=train_majority,
    summarise=lambda config, results: summarise(results.history, config, results.extra),
    summary_file=SUMMARY,
    summary_format={"indent": 1},
    describe=describe,
    # a config from before the kinds gave its steps on the command line alone
    added={"steps": 14_000}))
