"""The numerics every attention path shares: one masked log-sum-exp and softmax (no NaN for a
slice with nothing in it), exact power-of-two rescaling, and NAP's epsilon. The quadratic weight
functions (``weights.py``) and the blockwise fast paths (``fast.py``) both build on these.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

Array = jax.Array

NAP_EPSILON = 1e-3  # added to the standard deviation, as the NAP paper's code release does


def power_of_two_exponent(magnitude: Array) -> Array:
  """The integer e with ``magnitude < 2**e``, clipped so that ``2**-e`` and ``eps * 2**-e`` stay
  finite and ``2**-e`` is a normal number (subnormals may be flushed to zero).

  Args:
    magnitude: non-negative floating-point array (e.g. a row's largest ``|logit|``).

  Returns:
    Integer array of ``magnitude``'s shape (``frexp``'s exponent, clipped); carries no gradient.
  """
  info = jnp.finfo(magnitude.dtype)
  _, e = jnp.frexp(jax.lax.stop_gradient(magnitude))
  return jnp.clip(e, -(info.maxexp // 2), info.maxexp - 2)


def power_of_two(e: Array, dtype) -> Array:
  """``2**e`` for integers e in the normal range of ``dtype``, written into the exponent bits:
  multiplying by it is exact, so rescaling commutes with rounding.

  Args:
    e: integer array of exponents in the normal range of ``dtype``.
    dtype: the floating-point dtype of the result.

  Returns:
    ``2**e``, of ``e``'s shape and dtype ``dtype``.
  """
  info = jnp.finfo(dtype)
  ints = jnp.int64 if info.bits == 64 else jnp.int32
  bits = (e.astype(ints) + (info.maxexp - 1)) << info.nmant
  return jax.lax.bitcast_convert_type(bits, dtype)


def check_nap_eps(eps) -> None:
  """Refuse a NAP epsilon that is not > 0: a constant row would be divided by 0.

  Args:
    eps: the constant NAP adds to the standard deviation.

  Raises:
    ValueError: if ``eps > 0`` does not hold (also for NaN).
  """
  if not eps > 0:
    raise ValueError(f"eps must be > 0 (a constant row has std 0), got {eps!r}")


def _shifted_exp(x: Array, axis: int) -> tuple[Array, Array, Array]:
  """``(exp(x - shift), its sum, shift)`` along ``axis`` (kept), shift the slice's max: no
  overflow. The shift carries no gradient and is 0 where a slice has no finite entry."""
  shift = jax.lax.stop_gradient(jnp.max(x, axis=axis, keepdims=True))
  shift = jnp.where(jnp.isfinite(shift), shift, 0.0)
  e = jnp.exp(x - shift)
  return e, jnp.sum(e, axis=axis, keepdims=True), shift


def masked_logsumexp(x: Array, mask: Optional[Array] = None, axis: int = -1, *,
                     keepdims: bool = False, empty: float = 0.0) -> Array:
  """``logsumexp(x, axis)`` over the entries ``mask`` keeps (and the finite ones).

  The one log-sum-exp of the attention code: every normalisation in log space goes through it.

  Args:
    x: the values.
    mask: True where an entry counts; None counts every entry.
    axis: the axis summed over.
    keepdims: keep ``axis`` with size 1.
    empty: the value of a slice with no entry (0 keeps ``x - lse`` finite-or--inf, never NaN;
      -inf is the exact value, for combining partial sums).

  Returns:
    The log-sum-exp; its gradient is the softmax of the kept entries (0 elsewhere).
  """
  if mask is not None:
    x = jnp.where(mask, x, -jnp.inf)
  _, total, shift = _shifted_exp(x, axis)
  out = jnp.where(total > 0, jnp.log(jnp.where(total > 0, total, 1.0)) + shift, empty)
  return out if keepdims else jnp.squeeze(out, axis)


def masked_softmax(x: Array, mask: Optional[Array] = None, axis: int = -1) -> Array:
  """Softmax along ``axis`` over the entries ``mask`` keeps, one exp per entry; a slice with no
  entry gives zeros (not NaN).

  Args:
    x: floating-point values.
    mask: boolean, broadcastable to ``x``, True where an entry counts; None counts every entry.
    axis: the axis normalised over.

  Returns:
    Weights of ``x``'s shape and dtype, summing to 1 along ``axis``; 0 at masked entries.
  """
  if mask is not None:
    x = jnp.where(mask, x, -jnp.inf)
  e, total, _ = _shifted_exp(x, axis)
  return e / jnp.where(total > 0, total, 1.0)


def log_normalize(x: Array, mask: Optional[Array], axis: int) -> Array:
  """``x - logsumexp(x, axis)`` over the unmasked entries; masked entries become -inf.

  A slice with no unmasked entry stays all -inf (so its weights are 0, not NaN).

  Args:
    x: floating-point values.
    mask: boolean, broadcastable to ``x``, True where an entry counts; None counts every entry.
    axis: the axis normalised over.

  Returns:
    Log-weights of ``x``'s shape whose exponentials sum to 1 along ``axis``.
  """
  if mask is not None:
    x = jnp.where(mask, x, -jnp.inf)
  out = x - masked_logsumexp(x, axis=axis, keepdims=True)
  return out if mask is None else jnp.where(mask, out, -jnp.inf)
