"""Attention weight functions: one pure function per normalisation, ``logits -> weights``.

Every function takes floating-point ``logits`` of shape ``[..., q, k]`` (q, k >= 1) and an
optional boolean ``mask`` broadcastable to it (True = attend). It returns weights of the logits'
shape and dtype that are exactly 0 at masked positions and never NaN, also for fully masked rows,
huge logits or bf16 input: the arithmetic runs in float32 (at least) and the result is cast back.
Integer logits are refused: the weights would be truncated to integers.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax.attention.numerics import (NAP_EPSILON, check_nap_eps, column_max,
                                             masked_logsumexp, masked_softmax, power_of_two,
                                             power_of_two_exponent, shift_columns_then_rows)
from normattn_jax.validation import check_int

Array = jax.Array


def _compute_dtype(dtype) -> jnp.dtype:
  return jnp.promote_types(dtype, jnp.float32)


def _check_logits(logits) -> Array:
  logits = jnp.asarray(logits)
  if not jnp.issubdtype(logits.dtype, jnp.floating):
    raise TypeError(f"logits must be floating point, got dtype {logits.dtype}")
  if logits.ndim < 2 or 0 in logits.shape[-2:]:
    raise ValueError(f"logits must have shape [..., q, k] with q, k >= 1, got shape {logits.shape}")
  return logits


def _check_mask(logits: Array, mask: Optional[Array]) -> Optional[Array]:
  if mask is None:
    return None
  mask = jnp.asarray(mask)
  if mask.dtype != jnp.bool_:
    raise TypeError(f"mask must be boolean (True = attend), got dtype {mask.dtype}")
  try:
    np.broadcast_shapes(mask.shape, logits.shape)
  except ValueError:
    raise ValueError(
        f"mask of shape {mask.shape} does not broadcast to logits of shape {logits.shape}"
    ) from None
  if np.broadcast_shapes(mask.shape, logits.shape) != logits.shape:
    raise ValueError(
        f"mask of shape {mask.shape} would enlarge logits of shape {logits.shape}")
  return jnp.broadcast_to(mask, logits.shape)


def _check_broadcast_param(name: str, value, logits: Array):
  """Per-head parameters (u, gain, bias) broadcast against ``logits[..., :1, :1]``."""
  value = jnp.asarray(value)
  target = logits.shape[:-2] + (1, 1)
  try:
    shape = np.broadcast_shapes(value.shape, target)
  except ValueError:
    shape = None
  if shape != target:
    raise ValueError(
        f"{name} of shape {value.shape} must broadcast to logits[..., :1, :1] of shape {target}")
  return value


def _is_concrete(x) -> bool:
  return not isinstance(x, jax.core.Tracer)


def softmax_weights(logits: Array, mask: Optional[Array] = None) -> Array:
  """UNAS: softmax over the keys of each query (Vaswani et al.).

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    Weights of ``logits``' shape and dtype; each query's row sums to 1 over its valid keys
    (0 for a row without any).
  """
  logits = _check_logits(logits)
  mask = _check_mask(logits, mask)
  x = logits.astype(_compute_dtype(logits.dtype))
  return masked_softmax(x, mask).astype(logits.dtype)


def _sinkhorn_log(x: Array, num_iters: int, mask: Optional[Array]) -> Array:
  """Log-weights after ``num_iters`` Sinkhorn iterations, as ``y_ij - c_j - r_i``.

  ``y`` (``shift_columns_then_rows``) holds the logits less their huge column and row maxima;
  the iterations then only move the small offsets: ``c_j`` makes each key's weights over the
  queries sum to 1, ``r_i`` each query's weights over the keys. Neither is ever added to a
  huge number that matters, so ties between huge logits stay exact.
  """
  top = column_max(x, mask)
  c = masked_logsumexp(x - top, mask, axis=-2, keepdims=True)  # in [0, log q]
  y = shift_columns_then_rows(x, top, mask)
  r = masked_logsumexp(y - c, mask, axis=-1, keepdims=True)
  for _ in range(num_iters - 1):
    c = masked_logsumexp(y - r, mask, axis=-2, keepdims=True)
    r = masked_logsumexp(y - c, mask, axis=-1, keepdims=True)
  return y - c - r


def dnas_weights(logits: Array, mask: Optional[Array] = None) -> Array:
  """DNAS (Ding et al., Eq. 5): softmax over the queries of each key, then renormalised over keys.

  Every key keeps a total weight of at least 1/S over the queries (Theorem 2): nothing is
  "explained away".

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    Weights of ``logits``' shape and dtype; each query's row sums to 1 over its valid keys
    (0 for a row without any).
  """
  return sinkhorn_weights(logits, 1, mask)


def sinkhorn_weights(logits: Array, num_iters: int, mask: Optional[Array] = None) -> Array:
  """``num_iters`` Sinkhorn iterations (column, then row normalisation) in log space.

  One iteration is DNAS; as iterations grow the weights become doubly stochastic (Eq. 9-10).

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    num_iters: the number of Sinkhorn iterations, a positive integer.
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    Weights of ``logits``' shape and dtype; each query's row sums to 1 over its valid keys
    (0 for a row without any).
  """
  check_int("num_iters", num_iters)
  logits = _check_logits(logits)
  mask = _check_mask(logits, mask)
  x = logits.astype(_compute_dtype(logits.dtype))
  return jnp.exp(_sinkhorn_log(x, int(num_iters), mask)).astype(logits.dtype)


def hnas_weights(logits: Array, u, mask: Optional[Array] = None) -> Array:
  """HNAS (Eq. 12): ``u * DNAS + (1 - u) * UNAS`` with ``u`` in [0, 1] per head.

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    u: the DNAS share, in [0, 1], broadcastable to ``logits[..., :1, :1]`` (e.g. ``[h, 1, 1]``).
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    Weights of ``logits``' shape and dtype; each query's row sums to 1 over its valid keys
    (0 for a row without any).

  Raises:
    ValueError: if a concrete ``u`` lies outside [0, 1].
  """
  logits = _check_logits(logits)
  u = _check_broadcast_param("u", u, logits)
  if _is_concrete(u) and not bool(jnp.all((u >= 0) & (u <= 1))):
    raise ValueError(f"u must lie in [0, 1], got {np.asarray(u).tolist()}")
  mask = _check_mask(logits, mask)
  dtype = _compute_dtype(logits.dtype)
  x = logits.astype(dtype)
  u = u.astype(dtype)
  unas = masked_softmax(x, mask)
  dnas = jnp.exp(_sinkhorn_log(x, 1, mask))
  return (u * dnas + (1 - u) * unas).astype(logits.dtype)


def _valid_count(logits: Array, mask: Optional[Array], dtype) -> Array:
  if mask is None:
    return jnp.full(logits.shape[:-1] + (1,), logits.shape[-1], dtype)
  return jnp.sum(mask, axis=-1, keepdims=True).astype(dtype)


def nap_weights(logits: Array, gain=1.0, bias=0.0, mask: Optional[Array] = None,
                eps: float = NAP_EPSILON) -> Array:
  """NAP (Richter & Wattenhofer, Eq. 1): ``gain * (l - mean) / (std + eps) + bias``, eps > 0.

  Mean and population standard deviation are taken over the valid keys of each query, so the
  weights are independent of the sequence length and can be negative (no probability cage).
  Each row is first divided by a power of two s just above its largest ``|l|``, and
  ``(l/s - mean/s) / (std/s + eps/s)`` is computed instead: the same number, since scaling by a
  power of two is exact, but the mean and the squares cannot overflow for any finite logits.
  The row's largest logit is subtracted before the mean is taken, so equal logits centre to
  exactly 0 (not to a rounding residue, which eps/s would no longer damp at huge scales).

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    gain: the scale, broadcastable to ``logits[..., :1, :1]`` (e.g. one per head).
    bias: the shift, broadcastable to ``logits[..., :1, :1]``.
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.
    eps: added to the standard deviation (in logit units), > 0.

  Returns:
    Weights of ``logits``' shape and dtype; 0 at masked positions, ``bias`` for a constant row.
  """
  logits = _check_logits(logits)
  gain = _check_broadcast_param("gain", gain, logits)
  bias = _check_broadcast_param("bias", bias, logits)
  check_nap_eps(eps)
  mask = _check_mask(logits, mask)
  dtype = _compute_dtype(logits.dtype)
  x = logits.astype(dtype)
  if mask is not None:
    x = jnp.where(mask, x, 0.0)
  e = power_of_two_exponent(jnp.max(jnp.abs(x), axis=-1, keepdims=True))
  x = x * power_of_two(-e, dtype)
  ref = jax.lax.stop_gradient(jnp.max(x if mask is None else jnp.where(mask, x, -jnp.inf),
                                      axis=-1, keepdims=True))
  x = x - jnp.where(jnp.isfinite(ref), ref, 0.0)  # |x| <= 8: no overflow
  if mask is not None:
    x = jnp.where(mask, x, 0.0)
  count = jnp.maximum(_valid_count(logits, mask, dtype), 1.0)
  mean = jnp.sum(x, axis=-1, keepdims=True) / count
  centred = x - mean
  if mask is not None:
    centred = jnp.where(mask, centred, 0.0)
  var = jnp.sum(centred * centred, axis=-1, keepdims=True) / count
  positive = var > 0  # keeps the gradient of sqrt finite where all logits are equal
  std = jnp.where(positive, jnp.sqrt(jnp.where(positive, var, 1.0)), 0.0)
  # eps/s may underflow to 0 for logits near the float maximum; then std = 0 only if the row
  # is constant, whose centred logits are 0
  den = std + eps * power_of_two(-e, dtype)
  out = jnp.where(den > 0, gain.astype(dtype) * centred / jnp.where(den > 0, den, 1.0), 0.0)
  out = out + bias.astype(dtype)
  if mask is not None:
    out = jnp.where(mask, out, 0.0)
  return out.astype(logits.dtype)


def non_weights(logits: Array, mask: Optional[Array] = None) -> Array:
  """NON: the logits themselves, scaled by ``1/sqrt(n)`` for n valid keys (no normalisation).

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    ``logits / sqrt(n)`` for the row's n valid keys (at least 1), of ``logits``' shape and dtype;
    0 at masked positions.
  """
  logits = _check_logits(logits)
  mask = _check_mask(logits, mask)
  dtype = _compute_dtype(logits.dtype)
  x = logits.astype(dtype)
  count = jnp.maximum(_valid_count(logits, mask, dtype), 1.0)
  out = x / jnp.sqrt(count)
  if mask is not None:
    out = jnp.where(mask, out, 0.0)
  return out.astype(logits.dtype)


def _row_count(logits: Array, mask: Optional[Array], dtype) -> Array:
  """The row's number of valid keys, ``[..., q, 1]``, at least 1 (so ``log(n)`` is finite)."""
  return jnp.maximum(_valid_count(logits, mask, dtype), 1.0)


def _prepare(logits, mask) -> tuple[Array, Optional[Array], Array]:
  """Checked logits in the compute dtype, masked entries set to 0 (so no -inf or NaN from a
  masked entry reaches the arithmetic or its gradient), the checked mask and the input logits."""
  logits = _check_logits(logits)
  mask = _check_mask(logits, mask)
  x = logits.astype(_compute_dtype(logits.dtype))
  if mask is not None:
    x = jnp.where(mask, x, 0.0)
  return x, mask, logits


def _zero_masked(w: Array, mask: Optional[Array]) -> Array:
  return w if mask is None else jnp.where(mask, w, 0.0)


def sigmoid_weights(logits: Array, bias=None, mask: Optional[Array] = None) -> Array:
  """Sigmoid attention (Ramapuram et al. 2024): ``sigmoid(l + b)`` per key, rows not coupled.

  The default bias ``b = -log(n)`` for n valid keys keeps the row's total weight near 1 at
  initialisation, as the paper recommends.

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    bias: the shift, broadcastable to ``logits[..., :1, :1]`` (e.g. one per head); None uses
      ``-log(n)`` per row.
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    Weights in [0, 1] of ``logits``' shape and dtype; 0 at masked positions.
  """
  x, mask, logits = _prepare(logits, mask)
  dtype = x.dtype
  if bias is None:
    b = -jnp.log(_row_count(logits, mask, dtype))
  else:
    b = _check_broadcast_param("bias", bias, logits).astype(dtype)
  return _zero_masked(jax.nn.sigmoid(x + b), mask).astype(logits.dtype)


def sink_weights(logits: Array, sink=0.0, mask: Optional[Array] = None) -> Array:
  """Softmax with an attention sink: ``exp(l_j) / (exp(sink) + sum_valid exp(l_k))``.

  One extra logit ``sink`` that no value belongs to absorbs weight, so a row may sum to less
  than 1; ``sink = 0`` is softmax_1 ("off-by-one" softmax), ``sink -> -inf`` is softmax. The
  weights are a softmax over the valid logits and the sink, the sink's share dropped: each
  exponential is taken of its distance below the row's largest, so none overflows and huge
  logits keep their ratios (a log-sum-exp subtracted from each would round them away).

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    sink: the sink logit, broadcastable to ``logits[..., :1, :1]`` (e.g. one per head).
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    Weights of ``logits``' shape and dtype, each row summing to less than 1 (0 for a row
    without valid keys); 0 at masked positions.
  """
  x, mask, logits = _prepare(logits, mask)
  dtype = x.dtype
  sink = _check_broadcast_param("sink", sink, logits).astype(dtype)
  sink = jnp.broadcast_to(sink, x.shape[:-1] + (1,))
  keep = jnp.ones(x.shape[:-1] + (1,), bool)
  with_sink = masked_softmax(jnp.concatenate([x, sink], axis=-1),
                             None if mask is None else jnp.concatenate([mask, keep], axis=-1))
  return with_sink[..., :-1].astype(logits.dtype)


def check_softpick_eps(eps) -> None:
  """Refuse a softpick epsilon that is not >= 0 (a concrete one; a traced one is not checked).

  Args:
    eps: the constant softpick adds to its denominator.

  Raises:
    ValueError: if ``eps >= 0`` does not hold (also for NaN).
  """
  if _is_concrete(eps) and not bool(np.all(np.asarray(eps) >= 0)):
    raise ValueError(f"eps must be >= 0, got {eps!r}")


def softpick_weights(logits: Array, mask: Optional[Array] = None, eps: float = 1e-6) -> Array:
  """Softpick (Zuhri et al. 2025): ``relu(exp(l) - 1) / (sum_valid |exp(l) - 1| + eps)``.

  Keys with ``l <= 0`` get exactly 0 and a row may sum to less than 1 (no attention sink
  needed). Numerator and denominator are both multiplied by ``exp(-m)``, ``m`` the larger of the
  row's largest valid logit and 0: ``relu(exp(l - m) - exp(-m)) / (sum |exp(l - m) - exp(-m)| +
  eps * exp(-m))``, the same number with no overflow for any finite logits.

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.
    eps: added to the denominator, >= 0.

  Returns:
    Weights in [0, 1) of ``logits``' shape and dtype, each row summing to at most 1; 0 at masked
    positions and for a row without valid keys.
  """
  check_softpick_eps(eps)
  x, mask, logits = _prepare(logits, mask)
  dtype = x.dtype
  top = jnp.max(x if mask is None else jnp.where(mask, x, -jnp.inf), axis=-1, keepdims=True)
  m = jax.lax.stop_gradient(jnp.maximum(top, 0.0))  # the identity holds for any constant m
  d = _zero_masked(jnp.exp(x - m) - jnp.exp(-m), mask)
  den = jnp.sum(jnp.abs(d), axis=-1, keepdims=True) + jnp.asarray(eps, dtype) * jnp.exp(-m)
  out = jnp.where(den > 0, jax.nn.relu(d) / jnp.where(den > 0, den, 1.0), 0.0)
  return out.astype(logits.dtype)


def ssmax_weights(logits: Array, scale=1.0, mask: Optional[Array] = None) -> Array:
  """Scalable-Softmax (Nakanishi 2025): ``softmax(scale * log(n) * l)`` for n valid keys.

  The ``log(n)`` factor keeps the largest weight from fading as the context grows. The product
  is taken of each logit's distance from the row's top (by ``scale``'s sign) rather than of the
  logit, so logits near the float maximum keep their order instead of clipping into a tie;
  distances past the float range, whose weights are 0 at any ``|scale| * log(n)`` above 1e-36,
  are clipped to it.

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    scale: the paper's s, broadcastable to ``logits[..., :1, :1]`` (e.g. one per head).
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    Weights of ``logits``' shape and dtype; each query's row sums to 1 over its valid keys
    (0 for a row without any).
  """
  x, mask, logits = _prepare(logits, mask)
  dtype = x.dtype
  scale = _check_broadcast_param("scale", scale, logits).astype(dtype)
  c = scale * jnp.log(_row_count(logits, mask, dtype))
  valid = lambda fill: x if mask is None else jnp.where(mask, x, fill)
  top = jnp.where(c >= 0, jnp.max(valid(-jnp.inf), axis=-1, keepdims=True),
                  jnp.min(valid(jnp.inf), axis=-1, keepdims=True))
  top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))  # softmax is shift-free
  big = jnp.finfo(dtype).max
  z = c * jnp.clip(x - top, -big, big)  # <= 0: the row's top entry is 0
  return masked_softmax(z, mask).astype(logits.dtype)


def _sorted_desc(y: Array) -> Array:
  return -jnp.sort(-y, axis=-1)


def _sparse_shift(z: Array, floor: float) -> tuple[Array, Array]:
  """``(clip(z - max, floor, 0), valid)``, ``valid = z > -inf`` (the masked entries).

  The row's top weight is at most 1, so its threshold lies at most 1 below the largest entry:
  clipping far lower entries to ``floor < -1`` changes no weight, and keeps the cumulative sums
  and squares of huge logits finite. A fully masked row is shifted by 0 (its weights are zeroed).
  """
  valid = z > -jnp.inf
  top = jnp.max(z, axis=-1, keepdims=True)
  top = jnp.where(jnp.isfinite(top), top, 0.0)
  return jnp.clip(z - top, floor, 0.0), valid


def _sparsemax_forward(z: Array) -> Array:
  y, valid = _sparse_shift(z, -2.0)
  ys = _sorted_desc(y)
  k = jnp.arange(1, y.shape[-1] + 1, dtype=y.dtype)
  cums = jnp.cumsum(ys, axis=-1)
  support = jnp.sum(1.0 + k * ys > cums, axis=-1, keepdims=True)  # >= 1: the top is in
  tau = (jnp.take_along_axis(cums, support - 1, axis=-1) - 1.0) / support.astype(y.dtype)
  return jnp.where(valid, jax.nn.relu(y - tau), 0.0)


@jax.custom_vjp
def _sparsemax(z: Array) -> Array:
  return _sparsemax_forward(z)


def _sparsemax_fwd(z):
  w = _sparsemax_forward(z)
  return w, w


def _sparsemax_bwd(w, g):
  support = w > 0
  size = jnp.maximum(jnp.sum(support, axis=-1, keepdims=True), 1).astype(g.dtype)
  mean = jnp.sum(jnp.where(support, g, 0.0), axis=-1, keepdims=True) / size
  return (jnp.where(support, g - mean, 0.0),)


_sparsemax.defvjp(_sparsemax_fwd, _sparsemax_bwd)


def sparsemax_weights(logits: Array, mask: Optional[Array] = None) -> Array:
  """Sparsemax (Martins & Astudillo 2016): the Euclidean projection of the row onto the simplex.

  ``w = relu(l - tau)`` with the threshold tau making each row sum to 1, found by sorting
  (Algorithm 1); small logits get exactly 0. The gradient is the closed-form Jacobian-vector
  product ``g - mean_support(g)`` on the support, 0 off it (a custom VJP, not autodiff through
  the sort).

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    Weights of ``logits``' shape and dtype; each query's row sums to 1 over its valid keys
    (0 for a row without any).
  """
  x, mask, logits = _prepare(logits, mask)
  z = x if mask is None else jnp.where(mask, x, -jnp.inf)
  return _sparsemax(z).astype(logits.dtype)


def _entmax15_forward(z: Array) -> Array:
  y, valid = _sparse_shift(z / 2, -2.0)  # the paper's (alpha - 1) z with alpha = 1.5
  ys = _sorted_desc(y)
  k = jnp.arange(1, y.shape[-1] + 1, dtype=y.dtype)
  mean = jnp.cumsum(ys, axis=-1) / k
  mean_sq = jnp.cumsum(ys * ys, axis=-1) / k
  delta = (1.0 - k * (mean_sq - mean * mean)) / k
  taus = mean - jnp.sqrt(jax.nn.relu(delta))
  support = jnp.sum(taus <= ys, axis=-1, keepdims=True)  # >= 1: tau_1 = y_1 - 1
  tau = jnp.take_along_axis(taus, support - 1, axis=-1)
  return jnp.where(valid, jnp.square(jax.nn.relu(y - tau)), 0.0)


@jax.custom_vjp
def _entmax15(z: Array) -> Array:
  return _entmax15_forward(z)


def _entmax15_fwd(z):
  w = _entmax15_forward(z)
  return w, w


def _entmax15_bwd(w, g):
  s = jnp.sqrt(w)  # 0 off the support
  total = jnp.sum(s, axis=-1, keepdims=True)
  q = jnp.sum(s * g, axis=-1, keepdims=True) / jnp.where(total > 0, total, 1.0)
  return (s * g - q * s,)


_entmax15.defvjp(_entmax15_fwd, _entmax15_bwd)


def entmax15_weights(logits: Array, mask: Optional[Array] = None) -> Array:
  """1.5-entmax (Peters et al. 2019): ``w = relu(l / 2 - tau)**2``, each row summing to 1.

  Between softmax and sparsemax: small logits get exactly 0. The threshold tau comes from the
  exact sort algorithm (Algorithm 2: sorted cumulative means and mean squares). The gradient is
  the closed-form Jacobian-vector product: with ``s = sqrt(w)``, ``s * g - (sum s*g / sum s) * s``
  (a custom VJP, not autodiff through the sort).

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    Weights of ``logits``' shape and dtype; each query's row sums to 1 over its valid keys
    (0 for a row without any).
  """
  x, mask, logits = _prepare(logits, mask)
  z = x if mask is None else jnp.where(mask, x, -jnp.inf)
  return _entmax15(z).astype(logits.dtype)


def stickbreaking_weights(logits: Array, mask: Optional[Array] = None) -> Array:
  """Stick-breaking attention (Tan et al. 2024): ``w_j = b_j * prod_{valid k > j} (1 - b_k)``.

  ``b = sigmoid(l)``; the stick is broken from the nearest (last) valid key backwards, so with
  a strictly causal mask key j keeps what the keys between it and the query left. Computed in
  log space, ``log w_j = log_sigmoid(l_j) + sum_{valid k > j} log_sigmoid(-l_k)``, by an
  exclusive reverse cumulative sum: stable for long rows and huge logits.

  Args:
    logits: floating-point attention logits, shape ``[..., q, k]``.
    mask: boolean, broadcastable to ``logits`` without enlarging it, True = attend; None
      attends every key.

  Returns:
    Weights in [0, 1] of ``logits``' shape and dtype, each row summing to at most 1 (exactly
    ``1 - prod_valid (1 - b_k)``); 0 at masked positions.
  """
  x, mask, logits = _prepare(logits, mask)
  rest = _zero_masked(jax.nn.log_sigmoid(-x), mask)  # log(1 - b_k), 0 for a masked key
  rev = jnp.cumsum(jnp.flip(rest, -1), axis=-1)
  rev = jnp.concatenate([jnp.zeros_like(rev[..., :1]), rev[..., :-1]], axis=-1)
  later = jnp.flip(rev, -1)  # sum over k > j, without subtracting (no cancellation)
  w = jnp.exp(jax.nn.log_sigmoid(x) + later)
  return _zero_masked(w, mask).astype(logits.dtype)
