"""Causal safety: which normalisations keep a causal mask's promise, and the one refusal of those
that do not.

Under a causal mask, query i sees the keys j <= i, so a decoder's output at position i must not
depend on the inputs after i. A normalisation whose weights of query i depend on its own row of
logits alone (softmax, NAP, NON, sigmoid, sink, ...) keeps that promise: the masked keys get weight
exactly 0 and their gradients are exactly 0. DNAS, HNAS and Sinkhorn also normalise each key's
column over the queries, and under a causal mask the queries that see key j are the positions
j, j + 1, ...: the output at position i then depends on every later position's query. No mask
can prevent that, so a causal call with such a normalisation is refused before anything is traced,
unless the caller passes ``allow_future_leak=True`` (wanting exactly that computation, as the
numerical tests comparing the paths do).

What is checked, and when:

- the ``causal`` flag (``is_causal`` in the NNX module): always, as it is a Python bool;
- a dense mask: where it is concrete (an array, not a tracer), it is read, and it is causal when it
  hides from every query the keys after it (``is_causal_mask``) and some key is seen by two
  queries (else no column holds two queries, and nothing leaks). A mask traced inside ``jit``
  has no values until the program runs, so it is not checked: under ``jit``, say ``causal=True``
  (checked) rather than passing a dense causal mask, or build the model outside ``jit`` once.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
OPT_IN = "allow_future_leak"  # the keyword that accepts the leak


def is_causal_mask(mask) -> bool:
  """Whether a concrete dense mask is causal in the sense that lets a column normalisation leak:
  no query sees a key after it (aligned at the ends where there are more keys than queries, at
  the starts where there are more queries, as both modules' causal masks are) and some key is
  seen by at least two queries.

  Args:
    mask: a concrete boolean (or 0/1) mask ``[..., q, k]``, True = attend; a traced mask, or
      None, is not read.

  Returns:
    True for such a mask; False for None, a traced mask, or any other.
  """
  if mask is None or isinstance(mask, jax.core.Tracer):
    return False
  mask = np.asarray(mask) != 0
  if mask.ndim < 2:
    return False
  n_q, n_k = mask.shape[-2:]
  if n_q < 2:
    return False
  later = np.triu(np.ones((n_q, n_k), bool), max(0, n_k - n_q) + 1)
  if (mask & later).any():
    return False
  return bool((mask.sum(-2) >= 2).any())


def refusal(name: str, declared: bool, what: str, safe: Optional[tuple] = None) -> str:
  """The message that refuses a causal call of a normalisation that is not causal-safe.

  Args:
    name: the normalisation's name (or its spec as a string).
    declared: whether it normalises over the queries (DNAS, HNAS, Sinkhorn); else it is a
      normalisation that does not declare itself causal-safe (a plugin's default).
    what: the causal call, e.g. "causal=True" or "a causal mask".
    safe: the causal-safe normalisations registered, for the message; None: softmax, as an
      example.

  Returns:
    The message.
  """
  if declared:
    why = ("it also normalises each key's weights over the queries, and under a causal mask the "
           "queries that see a key are that position and every later one, so the output at a "
           "position depends on the inputs after it (a decoder trained this way sees its future)")
  else:
    why = ("it is not declared causal-safe (Normalization.causal_safe: register it with "
           "causal_safe=True if each query's weights depend on its own row of logits alone; "
           "normattn_jax.attention.causality.future_dependence measures it)")
  others = ", ".join(safe) if safe else "softmax, for one"
  return (f"normalization {name!r} with {what}: {why}. Use a causal-safe normalisation "
          f"({others}), or pass {OPT_IN}=True to compute it anyway")


def check_causal(name: str, causal_safe: bool, normalizes_over_queries: bool, *,
                 causal: bool = False, mask=None, allow_future_leak: bool = False,
                 safe: Optional[tuple] = None, what: Optional[str] = None) -> None:
  """Refuse a causal call (the flag, or a concrete dense causal mask: ``is_causal_mask``) of a
  normalisation that is not causal-safe, unless ``allow_future_leak``.

  Args:
    name: the normalisation's name (or its spec as a string).
    causal_safe: its ``Normalization.causal_safe``.
    normalizes_over_queries: its ``Normalization.normalizes_over_queries`` (for the message).
    causal: the call's causal flag.
    mask: the call's dense mask, or None; a traced one is not read.
    allow_future_leak: accept the leak.
    safe: the causal-safe normalisations registered, for the message (None: softmax).
    what: how to name a causal call in the message (default "causal=True").

  Raises:
    ValueError: naming the normalisation, the causal call and the opt-in.
    TypeError: for an ``allow_future_leak`` that is not a bool.
  """
  if not isinstance(allow_future_leak, (bool, np.bool_)):
    raise TypeError(f"{OPT_IN} must be True or False, got {allow_future_leak!r}")
  if causal_safe or allow_future_leak:
    return
  if causal:
    what = what or "causal=True"
  elif is_causal_mask(mask):
    what = "a causal mask"
  else:
    return
  raise ValueError(refusal(name, normalizes_over_queries, what, safe))


def refuse_future_leak(name: str, causal: bool, allow_future_leak: bool) -> None:
  """``check_causal`` for the functions of one normalisation that normalises over the queries
  (``fast.dnas_attention`` and the like), which know what they are."""
  check_causal(name, False, True, causal=causal, allow_future_leak=allow_future_leak)


def causal_outputs(norm, implementation: str, q: Array, k: Array, v: Array,
                   params: Optional[Mapping[str, Array]] = None,
                   options: Optional[Mapping[str, Any]] = None, *,
                   allow_future_leak: bool = False, block_size: int = 256) -> Array:
  """One head group's causal attention on one of a normalisation's paths.

  Args:
    norm: a ``registry.Normalization``.
    implementation: "quadratic" (its weights under ``tril``), "fast" or "fused".
    q: queries ``[h, n, d]`` (already scaled).
    k: keys ``[h, n, d]``.
    v: values ``[h, n, e]``.
    params: its per-head parameters ``{name: [h]}``; None: ``initial_params``.
    options: its options; None: the defaults.
    allow_future_leak: compute it for a normalisation that is not causal-safe.
    block_size: queries per block of the blockwise fast and fused paths.

  Returns:
    The outputs ``[h, n, e]``.

  Raises:
    ValueError: for a normalisation that is not causal-safe (without ``allow_future_leak``),
      or a path it does not have.
  """
  h, n = q.shape[0], q.shape[-2]
  params = norm.initial_params(h, options) if params is None else params
  if implementation == "quadratic":
    check_causal(norm.name, norm.causal_safe, norm.normalizes_over_queries, causal=True,
                 allow_future_leak=allow_future_leak)
    mask = np.tril(np.ones((n, n), bool))
    weights = norm.attention_weights(jnp.einsum("hqd,hkd->hqk", q, k), mask, params, options)
    return jnp.einsum("hqk,hkd->hqd", weights, v)
  if implementation == "fast":
    return norm.fast_attention(q, k, v, params, options, causal=True, block_size=block_size,
                               allow_future_leak=allow_future_leak)
  if implementation == "fused":
    swap = lambda x: jnp.swapaxes(x, 0, 1)  # [h, n, d] <-> [n, h, d]
    return swap(norm.fused_attention(swap(q), swap(k), swap(v), params, options, causal=True,
                                     block_size=block_size, allow_future_leak=allow_future_leak))
  raise ValueError(f"implementation must be 'quadratic', 'fast' or 'fused', got "
                   f"{implementation!r}")


def future_dependence(norm, implementation: str, q: Array, k: Array, v: Array,
                      params: Optional[Mapping[str, Array]] = None,
                      options: Optional[Mapping[str, Any]] = None, *,
                      allow_future_leak: bool = False, block_size: int = 256) -> Array:
  """The largest ``|d out_i / d x_j|`` over the positions j after i, x each of q, k and v, of
  a causal call (``causal_outputs``): exactly 0 for a causal-safe normalisation (what
  ``Normalization.causal_safe`` declares), positive where the future leaks. Traceable (jit it).

  Args:
    norm: a ``registry.Normalization``.
    implementation: "quadratic", "fast" or "fused".
    q: queries ``[h, n, d]``.
    k: keys ``[h, n, d]``.
    v: values ``[h, n, e]``.
    params: its per-head parameters; None: ``initial_params``.
    options: its options; None: the defaults.
    allow_future_leak: measure a normalisation that is not causal-safe.
    block_size: queries per block of the blockwise fast and fused paths.

  Returns:
    A float32 scalar.
  """
  n = q.shape[-2]
  later = jnp.asarray(np.triu(np.ones((n, n), bool), 1))  # [i, j]: input j after output i
  outputs = lambda q, k, v: causal_outputs(norm, implementation, q, k, v, params, options,
                                           allow_future_leak=allow_future_leak,
                                           block_size=block_size)
  worst = jnp.zeros((), jnp.float32)
  for jacobian in jax.jacrev(outputs, argnums=(0, 1, 2))(q, k, v):  # [h, i, e, h, j, d]
    by_positions = jnp.moveaxis(jnp.abs(jacobian), (1, 4), (0, 1))   # [i, j, h, e, h, d]
    worst = jnp.maximum(worst, jnp.max(jnp.where(
        later.reshape(later.shape + (1,) * 4), by_positions, 0.0)).astype(jnp.float32))
  return worst
