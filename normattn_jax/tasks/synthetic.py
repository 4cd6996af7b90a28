"""On-device generators for the NAP paper's synthetic tasks (Richter & Wattenhofer, Section 5).

All are pure functions of a PRNG key, cheap enough to run inside the compiled training step, so
every step sees a fresh batch (the papers' infinite-data regime).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax.tasks import registry
from normattn_jax.validation import Option, integer

ARGMIN_TOKEN = 64  # if it occurs, the label is the position of the smallest token
FIRST_TOKEN = 50   # else, if it occurs, the label is the first position
#: The case task's three cases, in the order of ``CaseBatch.cases`` (0 argmin, 1 first, 2 argmax).
CASES = ("argmin", "first", "argmax")


class CaseBatch(NamedTuple):
  """A batch of the case task with each sequence's case, from which the per-case accuracies
  are read."""
  inputs: jax.Array  # [batch, seq_len] int32 tokens
  labels: jax.Array  # [batch] int32 positions
  cases: jax.Array   # [batch] int32: 0 argmin, 1 first, 2 argmax


def check_case_vocab(vocab_size: int, field: str = "vocab_size") -> None:
  """Refuse a vocabulary too small to hold the case task's switch tokens 50 and 64.

  Args:
    vocab_size: the number of token types.
    field: the name the error gives the value.

  Raises:
    ValueError: if ``vocab_size <= ARGMIN_TOKEN``.
  """
  if vocab_size <= ARGMIN_TOKEN:
    raise ValueError(f"{field} must exceed {ARGMIN_TOKEN} for the case task (tokens "
                     f"{ARGMIN_TOKEN} and {FIRST_TOKEN} switch the case), got {vocab_size}")


def case_labels(inputs: jax.Array) -> CaseBatch:
  """argmin if 64 occurs, else position 0 if 50 occurs, else argmax; ties to the first.

  Args:
    inputs: int tokens ``[batch, seq_len]``.

  Returns:
    A ``CaseBatch`` of ``inputs``, the int32 label positions ``[batch]`` and the int32 cases
    ``[batch]`` (0 argmin, 1 first, 2 argmax).
  """
  has_argmin = jnp.any(inputs == ARGMIN_TOKEN, axis=-1)
  has_first = jnp.any(inputs == FIRST_TOKEN, axis=-1)
  labels = jnp.where(has_argmin, jnp.argmin(inputs, axis=-1),
                     jnp.where(has_first, 0, jnp.argmax(inputs, axis=-1)))
  cases = jnp.where(has_argmin, 0, jnp.where(has_first, 1, 2))
  return CaseBatch(inputs, labels.astype(jnp.int32), cases.astype(jnp.int32))


def case_distinction(key: jax.Array, batch_size: int, seq_len: int,
                     vocab_size: int = 100) -> CaseBatch:
  """Uniform random tokens; at S=100, N=128 the cases occur 72.4% / 20.1% / 7.5% of the time.

  Args:
    key: a PRNG key.
    batch_size: the number of sequences.
    seq_len: the tokens per sequence.
    vocab_size: the number of token types, > 64.

  Returns:
    A ``CaseBatch`` with int32 ``inputs [batch_size, seq_len]``.

  Raises:
    ValueError: if ``vocab_size <= 64``.
  """
  check_case_vocab(vocab_size)
  inputs = jax.random.randint(key, (batch_size, seq_len), 0, vocab_size, jnp.int32)
  return case_labels(inputs)


def _uniform_without(key, shape, vocab_size, excluded):
  """Uniform tokens over ``range(vocab_size)`` minus the sorted ``excluded`` values."""
  x = jax.random.randint(key, shape, 0, vocab_size - len(excluded), jnp.int32)
  for value in sorted(excluded):
    x = x + (x >= value)
  return x


def balanced_case_set(key: jax.Array, num_per_case: int, seq_len: int,
                      vocab_size: int = 100) -> CaseBatch:
  """``num_per_case`` sequences of each case, forced as the paper's code does: argmin sequences
  get a 64 at a random position; first sequences have no 64 and get a 50; argmax sequences
  have neither.

  Args:
    key: a PRNG key.
    num_per_case: the number of sequences of each case.
    seq_len: the tokens per sequence.
    vocab_size: the number of token types, > 64.

  Returns:
    A ``CaseBatch`` of ``3 * num_per_case`` sequences: the argmin ones, then first, then argmax.

  Raises:
    ValueError: if ``vocab_size <= 64``.
  """
  check_case_vocab(vocab_size)
  shape = (num_per_case, seq_len)
  k_min, k_first, k_max, k_pos1, k_pos2 = jax.random.split(key, 5)
  rows = jnp.arange(num_per_case)
  argmin_inputs = jax.random.randint(k_min, shape, 0, vocab_size, jnp.int32)
  argmin_inputs = argmin_inputs.at[rows, jax.random.randint(k_pos1, (num_per_case,), 0, seq_len)
                                   ].set(ARGMIN_TOKEN)
  first_inputs = _uniform_without(k_first, shape, vocab_size, [ARGMIN_TOKEN])
  first_inputs = first_inputs.at[rows, jax.random.randint(k_pos2, (num_per_case,), 0, seq_len)
                                 ].set(FIRST_TOKEN)
  argmax_inputs = _uniform_without(k_max, shape, vocab_size, [FIRST_TOKEN, ARGMIN_TOKEN])
  return case_labels(jnp.concatenate([argmin_inputs, first_inputs, argmax_inputs]))


def case_guess_rate(seq_len: int, vocab_size: int = 100, num_per_case: int = 50000,
                    seed: int = 0) -> float:
  """The accuracy of the best input-independent guess on the argmin and argmax cases of
  ``balanced_case_set``: the largest share of one position among either case's labels.

  Ties go to the first occurrence (``case_labels``), so the labels of these cases favour early
  positions and the best constant guess beats 1/N (at N = 128, S = 100 about 1.46% against
  0.78%). The first case needs no input (its label is always position 0). Estimated from
  ``num_per_case`` sequences per case drawn with ``seed`` (a binomial standard error of about
  0.05 points at N = 128).

  Args:
    seq_len: N.
    vocab_size: S, > 64.
    num_per_case: sequences per case of the estimate.
    seed: the PRNG seed of the estimate.

  Returns:
    The rate, in (0, 1].
  """
  # one program (op by op, each of its operations on the 3 x num_per_case sequences would be
  # compiled alone); the counts on the host, where a boolean index's shape is known
  batch = jax.jit(balanced_case_set, static_argnums=(1, 2, 3))(
      jax.random.PRNGKey(seed), num_per_case, seq_len, vocab_size)
  labels, cases = np.asarray(batch.labels), np.asarray(batch.cases)
  rates = [np.float32(np.bincount(labels[cases == case], minlength=seq_len).max())
           / np.float32(num_per_case) for case in (0, 2)]
  return float(max(rates))


def case_shares(seq_len: int, vocab_size: int = 100) -> tuple[float, float, float]:
  """How often ``case_distinction``'s cases occur, exactly: argmin when the token 64 is among
  the N uniform tokens, 1 - (1 - 1/S)^N; else first when 50 is, (1 - 1/S)^N - (1 - 2/S)^N (given
  no 64, each token is uniform over the other S - 1); else argmax, (1 - 2/S)^N. At S = 100,
  N = 128: 72.4% / 20.1% / 7.5%, the NAP paper's numbers.

  Args:
    seq_len: N.
    vocab_size: S, > 64.

  Returns:
    ``(argmin, first, argmax)``, summing to 1.
  """
  check_case_vocab(vocab_size)
  no_argmin = (1 - 1 / vocab_size) ** seq_len
  neither = (1 - 2 / vocab_size) ** seq_len
  return 1 - no_argmin, no_argmin - neither, neither


def mode_guess_rate(seq_len: int, vocab_size: int) -> float:
  """The accuracy of the best guess blind to the input on ``mode_finding``, exactly: always the
  token 0, which wins every tie (the paper's "majority class base rate"). Its rate is the chance
  that no other token occurs more often than 0: the sum over 0's count c of P(c) times the share
  of the other N - c tokens' arrangements over S - 1 types with no type above c,
  (N - c)! [x^(N - c)] (sum_{k <= c} x^k / k!)^(S - 1) / (S - 1)^(N - c).

  Args:
    seq_len: N.
    vocab_size: S >= 2.

  Returns:
    The rate, in (0, 1]: at N = 32, 57.0% for S = 2, 6.3% for S = 32 and 4.6% for S = 64.
  """
  n, others = int(seq_len), int(vocab_size) - 1
  total = 0.0
  for c in range(n + 1):
    rest = n - c
    terms = np.array([1 / math.factorial(k) for k in range(min(c, rest) + 1)])
    poly = np.ones(1)
    for _ in range(others):
      poly = np.convolve(poly, terms)[:rest + 1]
    fits = poly[rest] * math.factorial(rest) / others ** rest if rest < len(poly) else 0.0
    total += math.comb(n, c) * (1 / vocab_size) ** c * (others / vocab_size) ** rest * fits
  return total


def mode_finding(key: jax.Array, batch_size: int, seq_len: int,
                 vocab_size: int = 10) -> tuple[jax.Array, jax.Array]:
  """Uniform random tokens; the label is the most frequent token, ties to the smallest value.

  Args:
    key: a PRNG key.
    batch_size: the number of sequences.
    seq_len: the tokens per sequence.
    vocab_size: the number of token types.

  Returns:
    ``(inputs, labels)``: int32 ``[batch_size, seq_len]`` and int32 ``[batch_size]``.
  """
  inputs = jax.random.randint(key, (batch_size, seq_len), 0, vocab_size, jnp.int32)
  return inputs, mode_labels(inputs, vocab_size)


def mode_labels(inputs: jax.Array, vocab_size: int) -> jax.Array:
  """The most frequent token of each row; argmax picks the smallest value among ties.

  Args:
    inputs: int tokens ``[batch, seq_len]`` in ``range(vocab_size)``.
    vocab_size: the number of token types.

  Returns:
    int32 ``[batch]``.
  """
  counts = jnp.sum(jax.nn.one_hot(inputs, vocab_size, dtype=jnp.int32), axis=-2)
  return jnp.argmax(counts, axis=-1).astype(jnp.int32)


def majority(key: jax.Array, batch_size: int, seq_len: int, num_classes: int = 20,
             min_margin: int = 0) -> tuple[jax.Array, jax.Array]:
  """The majority task of Brody et al.: uniform tokens of ``num_classes`` types; the label of
  every position is the most frequent type. With ``min_margin`` > 0 the majority type leads the
  runner-up by at least that many tokens (the paper uses 6): random positions of other types are
  turned into the majority type until it does. Returns (inputs, labels), both [batch, seq_len].

  Args:
    key: a PRNG key.
    batch_size: the number of sequences.
    seq_len: the tokens per sequence.
    num_classes: the number of token types.
    min_margin: the smallest lead of the majority type over the runner-up, in tokens.

  Returns:
    ``(inputs, labels)``, both int32 ``[batch_size, seq_len]`` (the labels constant per row).

  Raises:
    ValueError: if ``min_margin`` is not in [0, seq_len].
  """
  if not 0 <= min_margin <= seq_len:
    raise ValueError(f"min_margin must lie in [0, seq_len={seq_len}], got {min_margin}")
  k_tokens, k_order = jax.random.split(key)
  inputs = jax.random.randint(k_tokens, (batch_size, seq_len), 0, num_classes, jnp.int32)
  counts = jnp.sum(jax.nn.one_hot(inputs, num_classes, dtype=jnp.int32), axis=-2)
  top = jnp.argmax(counts, axis=-1)
  ranked = jnp.sort(counts, axis=-1)
  lead = ranked[:, -1] - ranked[:, -2] if num_classes > 1 else ranked[:, -1]
  needed = jnp.maximum(min_margin - lead, 0)              # each change raises the lead by >= 1
  is_top = inputs == top[:, None]
  order = jnp.argsort(jnp.where(is_top, jnp.inf, jax.random.uniform(k_order, inputs.shape)), -1)
  rank = jnp.argsort(order, axis=-1)                      # random rank among the other tokens
  inputs = jnp.where(rank < needed[:, None], top[:, None], inputs).astype(jnp.int32)
  labels = mode_labels(inputs, num_classes)
  return inputs, jnp.broadcast_to(labels[:, None], inputs.shape)


# ----- the registered tasks (normattn_jax.tasks.registry) -----

def _check_case_settings(settings) -> None:
  if settings.vocab_size <= ARGMIN_TOKEN:
    registry.fail("vocab_size", settings.vocab_size,
                  f"must exceed {ARGMIN_TOKEN} for the case task (tokens {ARGMIN_TOKEN} and "
                  f"{FIRST_TOKEN} switch the case)")
  if settings.seq_len < 2:
    registry.fail("seq_len", settings.seq_len, "must be >= 2 (validation uses half the length)")


def _sample_cases(key, batch_size, seq_len, settings):
  batch = case_distinction(key, batch_size, seq_len, settings.vocab_size)
  return batch.inputs, batch.labels


def _sample_balanced_cases(key, per_case, seq_len, settings):
  batch = balanced_case_set(key, per_case, seq_len, settings.vocab_size)
  return batch.inputs, batch.labels


CASE_DISTINCTION = registry.register(registry.Task(
    "case_distinction", _sample_cases, outputs=("tokens", "first"),
    validation_length=lambda seq_len: seq_len // 2,  # the NAP paper validates at N/2
    check=_check_case_settings,
    grouped_eval=registry.GroupedEval("case_acc", CASES, _sample_balanced_cases)))
MODE_FINDING = registry.register(registry.Task(
    "mode_finding", lambda key, batch_size, seq_len, settings: mode_finding(
        key, batch_size, seq_len, settings.vocab_size),
    outputs=("classes",),
    validation_length=lambda seq_len: 2 * seq_len,  # the NAP paper validates at 2N
    positional=False))  # counting tasks have no positional embedding in the paper
def _check_majority_settings(settings) -> None:
  if settings.min_margin > settings.seq_len:
    registry.fail("min_margin", settings.min_margin, "must lie in [0, task.seq_len]")


MAJORITY = registry.register(registry.Task(
    "majority", lambda key, batch_size, seq_len, settings: majority(
        key, batch_size, seq_len, settings.vocab_size, settings.min_margin),
    outputs=("token_classes",), positional=False, check=_check_majority_settings,
    # the majority type's least lead over the runner-up, in tokens (the paper: 6)
    settings=(Option("min_margin", 0, integer(0)),)))

#: The names above, fixed -- what the library ships, whatever a user registers later.
BUILTIN_TASKS = registry.names()
