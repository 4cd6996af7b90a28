"""The numerics every attention path shares: one masked log-sum-exp and softmax (no NaN for a
slice with nothing in it), exact power-of-two rescaling, exact differences (``two_difference``)
and the column-then-row shift of DNAS and Sinkhorn, and NAP's epsilon. The quadratic weight
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


def two_difference(a: Array, b: Array) -> tuple[Array, Array]:
  """``(hi, lo)`` with ``hi = fl(a - b)`` and ``hi + lo == a - b`` exactly (Knuth's TwoSum).

  What a huge difference rounds away is kept in ``lo``, so later steps can still tell apart
  two huge numbers that differ by little. The derivative of ``a - b`` is carried by ``hi``
  alone (``lo`` carries none).

  Args:
    a, b: finite floating-point arrays (broadcast together) whose difference does not overflow.

  Returns:
    ``(hi, lo)``, each of the broadcast shape.
  """
  hi = a - b
  a, b, s = (jax.lax.stop_gradient(t) for t in (a, b, hi))
  kept_b = s - a  # the part of -b the rounded difference holds
  lo = (a - (s - kept_b)) + (-b - kept_b)
  return hi, lo


def column_max(x: Array, mask: Optional[Array]) -> Array:
  """The largest entry of each column (axis -2) the mask keeps, 0 for a column without one;
  keeps the axis and carries no gradient (a shift the normalisations cancel)."""
  if mask is not None:
    x = jnp.where(mask, x, -jnp.inf)
  top = jax.lax.stop_gradient(jnp.max(x, axis=-2, keepdims=True))
  return jnp.where(jnp.isfinite(top), top, 0.0)


def shift_columns_then_rows(x: Array, top: Array, mask: Optional[Array]) -> Array:
  """``y_ij = x_ij - m_j - max_k (x_ik - m_k)`` for the column maxima ``top = m``: every
  column's and every row's largest valid entry becomes exactly 0; masked entries are -inf.

  DNAS and Sinkhorn normalise columns, then rows. Taking the huge maxima out first leaves only
  small log-sums to subtract afterwards: ``x - logsumexp`` would round ``log 2`` away from a
  logit of 1e8. The differences are taken of halves (which cannot overflow) as exact pairs
  (``two_difference``), and the row maximum of the pairs is subtracted from both parts, so
  ``y`` is exact to its own rounding wherever ``exp(y)`` is not negligible, for any finite
  logits. The shifts carry no gradient (a row or column shift changes no weight).

  Args:
    x: floating-point logits ``[..., q, k]``.
    top: the column maxima, ``[..., 1, k]`` (``column_max``).
    mask: boolean of ``x``'s shape, True where an entry counts; None counts every entry.

  Returns:
    ``y`` of ``x``'s shape, <= 0 up to rounding.
  """
  if mask is not None:
    x = jnp.where(mask, x, top)  # a masked entry (perhaps not finite) adds nothing below
  hi, lo = two_difference(0.5 * x, 0.5 * top)  # (x - m) / 2 = hi + lo
  if mask is not None:
    hi = jnp.where(mask, hi, -jnp.inf)
  row_hi = jax.lax.stop_gradient(jnp.max(hi, axis=-1, keepdims=True))
  row_hi = jnp.where(jnp.isfinite(row_hi), row_hi, 0.0)
  row_lo = jnp.max(jnp.where(hi == row_hi, lo, -jnp.inf), axis=-1, keepdims=True)
  row_lo = jnp.where(jnp.isfinite(row_lo), row_lo, 0.0)  # (row_hi, row_lo): the row's max
  lo_hi, lo_lo = two_difference(lo, row_lo)
  # hi - row_hi is exact where y is not hugely negative, and so is its sum with lo_hi
  y = 2.0 * (((hi - row_hi) + lo_hi) + lo_lo)
  return y if mask is None else jnp.where(mask, y, -jnp.inf)
