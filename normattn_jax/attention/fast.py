"""Exact fast attention paths that never form the N x N weight matrix.

Two identities make the new normalisations cheaper than their definitions:

* **NAP and NON are linear in N.** With l_ij = q_i . k_j, the sums over keys factor through
  d x d statistics of the keys: mean_i = q_i . mean(k), var_i = q_i^T Cov(k) q_i and
  sum_j (l_ij - mean_i) v_j = q_i^T sum_j (k_j - mean(k)) v_j^T. Time O(N d^2), extra memory
  O(d^2) per head (O(N d^2) for causal masks, whose sums become prefix sums).
* **DNAS and Sinkhorn are softmax attention with a per-key bias.** After t Sinkhorn iterations
  log pi_ij = l_ij - a_j - b_i; the row offset b cancels in the final row normalisation, so the
  output is softmax_j(l_ij - a_j) V. The offsets come from blockwise log-sum-exp passes, each
  O(block x N) memory; DNAS is one iteration. HNAS mixes a DNAS and a softmax output. Each a_j
  is kept as the key's largest logit m_j and a small c_j, and a block's logits lose m_j and
  their row maxima (``shift_columns_then_rows``) before c_j is subtracted, as in the quadratic
  functions: adding c_j to a huge m_j would round ties between huge logits away.
* **Sigmoid, softpick, Scalable-Softmax, stick-breaking and sink are row-local.** A row's weights
  depend on that row's logits alone, and a block of query rows holds every key, so the quadratic
  weight function applied to one block at a time is exact in O(block x N) memory. Sink is
  softmax attention scaled by ``sigmoid(lse - sink)``, from the same pass's log-sum-exp;
  Scalable-Softmax is softmax attention with query i scaled by ``s log(n_i)``.

All functions take floating-point ``q [..., h, n_q, d]``, ``k [..., h, n_k, d]``,
``v [..., h, n_k, e]`` (n_q, n_k >= 1; the logits are ``q . k``: scale ``q`` beforehand) and
structured masks: ``query_mask [..., n_q]``, ``key_mask [..., n_k]`` (True = valid) and
``causal``. Causal attention aligns the sequences at their ends (queries continuing a key
cache): query i sees the keys j <= i + n_k - n_q, so with n_q > n_k the first n_q - n_k queries
see none. They equal the quadratic weight functions of ``weights.py`` applied with
``mask = query_mask_i & key_mask_j & (j <= i + n_k - n_q if causal)``, to float rounding, values
and gradients; rows without a valid key give 0.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax.attention import weights as weights_lib
from normattn_jax.attention.causality import refuse_future_leak
from normattn_jax.attention.numerics import (NAP_EPSILON, check_nap_eps, masked_logsumexp,
                                             power_of_two, power_of_two_exponent,
                                             shift_columns_then_rows)
from normattn_jax.validation import check_int

Array = jax.Array
DEFAULT_BLOCK = 256


# ----- masks -----

def _mask_shape_check(name: str, mask, length: int) -> None:
  if mask is None:
    return
  if mask.dtype != jnp.bool_:
    raise TypeError(f"{name} must be boolean (True = valid), got dtype {mask.dtype}")
  if mask.shape[-1] != length:
    raise ValueError(f"{name} of shape {mask.shape} must end in the sequence length {length}")


def _check(q, k, v, query_mask, key_mask, causal):
  for name, x in (("q", q), ("k", k)):
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise TypeError(f"{name} must be floating point, got dtype {x.dtype}")
  if q.ndim < 3 or k.ndim != q.ndim or v.ndim != q.ndim:
    raise ValueError(f"q, k, v must share their rank (>= 3), got {q.shape}, {k.shape}, {v.shape}")
  if k.shape[-1] != q.shape[-1] or v.shape[-2] != k.shape[-2]:
    raise ValueError(f"incompatible shapes q {q.shape}, k {k.shape}, v {v.shape}")
  if q.shape[-2] == 0 or k.shape[-2] == 0:
    raise ValueError(f"need at least one query and one key, got q of shape {q.shape} and k of "
                     f"shape {k.shape}")
  _mask_shape_check("query_mask", query_mask, q.shape[-2])
  _mask_shape_check("key_mask", key_mask, k.shape[-2])


def _valid(mask: Optional[Array], length: int, dtype) -> Array:
  """``[..., 1, length]`` validity (1/0) broadcastable over heads."""
  if mask is None:
    return jnp.ones((1, length), dtype)
  return mask[..., None, :].astype(dtype)


def _block_mask(query_mask, key_mask, causal, rows: Array, n_q: int, n_k: int):
  """The element mask of a block of query rows ``rows [block]`` against all keys:
  ``[..., 1, block, n_k]`` (broadcastable over heads), or None if everything is valid."""
  mask = None
  if query_mask is not None:
    mask = query_mask[..., None, :, None]
  if key_mask is not None:
    km = key_mask[..., None, None, :]
    mask = km if mask is None else mask & km
  if causal:
    cm = rows[:, None] + (n_k - n_q) >= np.arange(n_k)[None, :]
    mask = cm if mask is None else mask & cm
  return mask


def _query_blocks(q: Array, block: int):
  """Pad the query axis to a multiple of ``block``; returns (padded q, number of blocks)."""
  n_q = q.shape[-2]
  block = min(block, n_q)
  pad = -n_q % block
  if pad:
    q = jnp.pad(q, [(0, 0)] * (q.ndim - 2) + [(0, pad), (0, 0)])
  return q, (n_q + pad) // block, block


def _padded_query_mask(query_mask: Optional[Array], n_q: int, padded: int, lead: tuple):
  if padded == n_q and query_mask is None:
    return None
  if query_mask is None:
    query_mask = jnp.ones(lead + (n_q,), bool)
  return jnp.pad(query_mask, [(0, 0)] * (query_mask.ndim - 1) + [(0, padded - n_q)])


def _split(x: Array, axis: int, num: int) -> Array:
  """Move ``num`` equal blocks of ``axis`` to a new leading axis (for ``lax.map``)."""
  axis = axis % x.ndim
  shape = x.shape[:axis] + (num, x.shape[axis] // num) + x.shape[axis + 1:]
  return jnp.moveaxis(x.reshape(shape), axis, 0)


def _unsplit(x: Array, axis: int) -> Array:
  axis = axis % (x.ndim - 1)
  x = jnp.moveaxis(x, 0, axis)
  return x.reshape(x.shape[:axis] + (x.shape[axis] * x.shape[axis + 1],) + x.shape[axis + 2:])


# ----- the bias passes (Sinkhorn offsets), blockwise over queries -----

class _Blocks:
  """Query blocks of one attention call, shared by the passes below."""

  def __init__(self, q, query_mask, key_mask, causal, block):
    self.n_q = q.shape[-2]
    qp, self.num, self.size = _query_blocks(q, block)
    self.q = _split(qp, -2, self.num)                       # [num, ..., h, size, d]
    qm = _padded_query_mask(query_mask, self.n_q, qp.shape[-2], q.shape[:-3])
    self.query_mask = None if qm is None else _split(qm, -1, self.num)
    # numpy, as the keys' indices in _block_mask, not an iota in the program: XLA's AVX-512 code
    # for an iota-derived causal mask let masked entries into Sinkhorn's second column pass when
    # there was one block
    self.rows = np.arange(qp.shape[-2]).reshape(self.num, self.size)
    self.key_mask, self.causal = key_mask, causal

  def map(self, fn, k, *per_block):
    """``lax.map`` of ``fn(q_block, mask_block, *per_block_args)`` over the query blocks, with
    rematerialisation so that the backward pass keeps O(block x N) memory too."""
    n_k = k.shape[-2]

    @jax.checkpoint
    def body(args):
      qb, qmb, rows, *rest = args
      mask = _block_mask(qmb, self.key_mask, self.causal, rows, self.n_q, n_k)
      return fn(qb, mask, *rest)

    qm = self.query_mask if self.query_mask is not None else jnp.zeros((self.num,), bool)
    return jax.lax.map(lambda a: body((a[0], None if self.query_mask is None else a[1], a[2],
                                       *a[3:])),
                       (self.q, qm, self.rows) + per_block)


def _raw_logits(qb, k):
  """float32 (or wider) logits whatever the inputs' dtype: the offsets that the passes below
  derive from them meet logits a kernel accumulates in float32 (cuDNN's), so rounding them to
  bf16 (steps of 0.5 near 100) would shift every weight."""
  return jnp.einsum("...qd,...kd->...qk", qb, k,
                    preferred_element_type=jnp.promote_types(qb.dtype, jnp.float32))


def _logits(qb, k, mask):
  l = _raw_logits(qb, k)
  return l if mask is None else jnp.where(mask, l, -jnp.inf)


def _full(mask, shape):
  return None if mask is None else jnp.broadcast_to(mask, shape)


def _column_statistics(blocks: _Blocks, k: Array) -> tuple[Array, Array]:
  """``(m_j, c_j)``: each key's largest logit over the valid queries and ``logsumexp_i (l_ij -
  m_j)`` (in [0, log n_q]), from one pass over the query blocks.

  Each block gives its own maximum and the log-sum-exp below it; the blocks are merged by
  shifting each by its distance to the overall maximum, so the huge ``m_j`` is never added to
  the small ``c_j`` (which would round ties between huge logits away). ``m_j`` carries no
  gradient: the column normalisation cancels it.
  """
  def partial(qb, mask):
    l = _logits(qb, k, mask)
    top = jax.lax.stop_gradient(jnp.max(l, axis=-2, keepdims=True))  # -inf: no valid entry
    shift = jnp.where(jnp.isfinite(top), top, 0.0)
    return top, masked_logsumexp(l - shift, axis=-2, keepdims=True, empty=-jnp.inf)

  tops, lses = blocks.map(partial, k)                          # [num, ..., h, 1, n_k] each
  top = jnp.max(tops, axis=0)
  top = jnp.where(jnp.isfinite(top), top, 0.0)
  return top, masked_logsumexp((tops - top) + lses, axis=0)   # over the query blocks


def _shifted_logits(qb, k, mask, top):
  """The block's logits less their column maxima ``top`` and then their row maxima
  (``shift_columns_then_rows``); -inf where masked."""
  l = _raw_logits(qb, k)
  return shift_columns_then_rows(l, top, _full(mask, l.shape))


def _column_offsets(blocks: _Blocks, k: Array, top: Array, row_offsets: Array) -> Array:
  """c_j = logsumexp_i (y_ij - r_i) over the valid queries i: a sum over query blocks."""
  def partial(qb, mask, r):
    y = _shifted_logits(qb, k, mask, top) - r[..., None]
    return masked_logsumexp(y, axis=-2, empty=-jnp.inf)        # -inf where a block has no entry

  return masked_logsumexp(blocks.map(partial, k, _split(row_offsets, -1, blocks.num)),
                          axis=0)[..., None, :]                 # over the query blocks


def _row_offsets(blocks: _Blocks, k: Array, top: Array, column_offsets: Array) -> Array:
  """r_i = logsumexp_j (y_ij - c_j) over the valid keys j, per query block."""
  def rows(qb, mask):
    return masked_logsumexp(_shifted_logits(qb, k, mask, top) - column_offsets, axis=-1)
  return _unsplit(blocks.map(rows, k), -1)[..., :blocks.n_q]


def _softmax_rows(l: Array, v: Array) -> tuple[Array, tuple[Array, Array]]:
  """``(softmax(l) V, (shift, log_sum))`` of a block of rows from one exp per logit (masked
  logits are -inf); the sum is divided out after ``V``. The rows' log-sum-exp is ``shift +
  log_sum``, kept apart so that a caller can subtract another huge number from ``shift`` first
  (``shift + log_sum`` would round ``log_sum`` away at ``|shift| ~ 1e8``). A row without a valid
  key gives 0 and shift -inf."""
  shift = jax.lax.stop_gradient(jnp.max(l, axis=-1, keepdims=True))
  shift = jnp.where(jnp.isfinite(shift), shift, 0.0)
  e = jnp.exp(l - shift)
  total = jnp.sum(e, axis=-1, keepdims=True)
  safe = jnp.where(total > 0, total, 1.0)
  out = jnp.einsum("...qk,...ke->...qe", e, v) / safe
  return out, (jnp.where(total > 0, shift, -jnp.inf), jnp.log(safe))


def _biased_softmax_attention(blocks: _Blocks, k, v, column_shift=None, with_lse: bool = False):
  """softmax_j(l_ij) V per query block, or with ``column_shift = (top, c)`` softmax_j(y_ij -
  c_j) V for the shifted logits y (``shift_columns_then_rows``); rows without a valid key
  give 0.

  With ``with_lse`` also the rows' log-sum-exp as ``(shift, log_sum)``, each ``[..., h, n_q,
  1]`` (``_softmax_rows``; shift -inf without a valid key), differentiable like the output (what
  the sink path scales by).
  """
  def attend(qb, mask):
    if column_shift is None:
      return _softmax_rows(_logits(qb, k, mask), v)
    top, c = column_shift
    return _softmax_rows(_shifted_logits(qb, k, mask, top) - c, v)
  out, (shift, log_sum) = blocks.map(attend, k)
  rows = lambda x: _unsplit(x, -2)[..., :blocks.n_q, :]
  return (rows(out), (rows(shift), rows(log_sum))) if with_lse else rows(out)


def _prepare(q, k, v, query_mask, key_mask, causal):
  _check(q, k, v, query_mask, key_mask, causal)
  dtype = jnp.promote_types(q.dtype, jnp.float32)
  return q.astype(dtype), k.astype(dtype), v.astype(dtype), q.dtype


def softmax_attention(q, k, v, *, query_mask=None, key_mask=None, causal=False,
                      block_size: int = DEFAULT_BLOCK) -> Array:
  """Softmax (UNAS) attention in query blocks: O(block x N) memory.

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: the number of queries per block, a positive integer.

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.
  """
  q, k, v, out_dtype = _prepare(q, k, v, query_mask, key_mask, causal)
  blocks = _Blocks(q, query_mask, key_mask, causal, block_size)
  return _biased_softmax_attention(blocks, k, v).astype(out_dtype)


def sinkhorn_attention(q, k, v, num_iters: int, *, query_mask=None, key_mask=None,
                       causal=False, block_size: int = DEFAULT_BLOCK,
                       allow_future_leak: bool = False) -> Array:
  """``num_iters`` Sinkhorn iterations as key biases: 2 num_iters - 1 blockwise passes.

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    num_iters: the number of Sinkhorn iterations, a positive integer.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: the number of queries per block, a positive integer.
    allow_future_leak: compute a causal call anyway: it normalises over the queries, so the
      output at a position then depends on the later positions (refused without it).

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.

  Raises:
    ValueError: for ``causal`` without ``allow_future_leak``.
  """
  refuse_future_leak("sinkhorn", causal, allow_future_leak)
  check_int("num_iters", num_iters)
  q, k, v, out_dtype = _prepare(q, k, v, query_mask, key_mask, causal)
  blocks = _Blocks(q, query_mask, key_mask, causal, block_size)
  return _biased_softmax_attention(blocks, k, v, _key_offsets(blocks, k, num_iters)).astype(
      out_dtype)


def _key_offsets(blocks: _Blocks, k: Array, num_iters: int) -> tuple[Array, Array]:
  """The key offsets of ``num_iters`` Sinkhorn iterations as the exact pair ``(m_j, c_j)``,
  a_j = m_j + c_j (``_column_statistics``): 2 num_iters - 1 passes."""
  top, c = _column_statistics(blocks, k)
  for _ in range(num_iters - 1):
    r = _row_offsets(blocks, k, top, c)
    r = jnp.pad(r, [(0, 0)] * (r.ndim - 1) + [(0, blocks.num * blocks.size - blocks.n_q)])
    c = _column_offsets(blocks, k, top, r)
  return top, c


def sinkhorn_key_offsets(q, k, num_iters: int, *, query_mask=None, key_mask=None, causal=False,
                         block_size: int = DEFAULT_BLOCK) -> Array:
  """The offsets a_j with Sinkhorn's weights after ``num_iters`` iterations equal to
  ``softmax_j(l_ij - a_j)`` over the valid keys: what a softmax kernel needs besides q, k, v
  (``fused.py``). For DNAS (one iteration) a_j = logsumexp_i l_ij over the valid queries.

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    num_iters: the number of Sinkhorn iterations, a positive integer.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: the number of queries per block, a positive integer.

  Returns:
    ``a [..., h, n_k]`` in float32 (at least), differentiable; 0 for a key no query sees.
  """
  check_int("num_iters", num_iters)
  q, k, _, _ = _prepare(q, k, k, query_mask, key_mask, causal)
  top, c = _key_offsets(_Blocks(q, query_mask, key_mask, causal, block_size), k, num_iters)
  return (top + c)[..., 0, :]  # one array for a kernel: exact to the rounding of the sum


def dnas_attention(q, k, v, *, query_mask=None, key_mask=None, causal=False,
                   block_size: int = DEFAULT_BLOCK, allow_future_leak: bool = False) -> Array:
  """DNAS: softmax attention with the key bias c_j = logsumexp_i l_ij (one column pass).

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: the number of queries per block, a positive integer.
    allow_future_leak: compute a causal call anyway: it normalises over the queries, so the
      output at a position then depends on the later positions (refused without it).

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.

  Raises:
    ValueError: for ``causal`` without ``allow_future_leak``.
  """
  refuse_future_leak("dnas", causal, allow_future_leak)
  return sinkhorn_attention(q, k, v, 1, query_mask=query_mask, key_mask=key_mask,
                            causal=causal, block_size=block_size, allow_future_leak=True)


def hnas_attention(q, k, v, u, *, query_mask=None, key_mask=None, causal=False,
                   block_size: int = DEFAULT_BLOCK, allow_future_leak: bool = False) -> Array:
  """HNAS: ``u * DNAS-out + (1 - u) * softmax-out``; ``u`` broadcasts to ``[..., h, 1, 1]``.

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    u: the DNAS share, in [0, 1], broadcastable to ``[..., h, 1, 1]``.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: the number of queries per block, a positive integer.
    allow_future_leak: compute a causal call anyway: it normalises over the queries, so the
      output at a position then depends on the later positions (refused without it).

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.

  Raises:
    ValueError: for ``causal`` without ``allow_future_leak``.
  """
  refuse_future_leak("hnas", causal, allow_future_leak)
  kwargs = dict(query_mask=query_mask, key_mask=key_mask, causal=causal, block_size=block_size)
  u = jnp.asarray(u, jnp.promote_types(q.dtype, jnp.float32))
  out = (u * dnas_attention(q, k, v, allow_future_leak=True, **kwargs)
         + (1 - u) * softmax_attention(q, k, v, **kwargs))
  return out.astype(q.dtype)


# ----- row-local normalisations: sink, sigmoid, softpick, Scalable-Softmax, stick-breaking -----

def _row_local_attention(q, k, v, weights_fn, query_mask, key_mask, causal,
                         block_size) -> Array:
  """``weights_fn(logits, mask) V`` per query block: exact for a normalisation whose weights of
  a row depend on that row's logits alone, since a block holds its rows against every key.

  ``weights_fn`` is the quadratic weight function itself (``weights.py``), given the block's
  unmasked logits ``[..., h, block, n_k]`` and element mask (None if all valid).
  """
  q, k, v, out_dtype = _prepare(q, k, v, query_mask, key_mask, causal)
  blocks = _Blocks(q, query_mask, key_mask, causal, block_size)

  def attend(qb, mask):
    l = jnp.einsum("...qd,...kd->...qk", qb, k)
    return jnp.einsum("...qk,...ke->...qe", weights_fn(l, mask), v)
  out = _unsplit(blocks.map(attend, k), -2)[..., :blocks.n_q, :]
  return out.astype(out_dtype)


def sink_attention(q, k, v, sink, *, query_mask=None, key_mask=None, causal=False,
                   block_size: int = DEFAULT_BLOCK) -> Array:
  """Softmax with an attention sink from the softmax pass alone: ``out * sigmoid(lse - sink)``.

  ``exp(l_j) / (exp(sink) + sum_k exp(l_k)) = softmax_j(l) * sigmoid(lse - sink)`` with ``lse``
  the row's log-sum-exp, so the blockwise softmax attention that yields ``lse`` gives the
  output, and its gradient (autodiff through the same blocks), with no second pass.

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    sink: the sink logit, broadcastable to ``[..., h, 1, 1]`` (e.g. one per head).
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: the number of queries per block, a positive integer.

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.
  """
  q, k, v, out_dtype = _prepare(q, k, v, query_mask, key_mask, causal)
  blocks = _Blocks(q, query_mask, key_mask, causal, block_size)
  out, (shift, log_sum) = _biased_softmax_attention(blocks, k, v, with_lse=True)
  sink = jnp.asarray(sink, q.dtype)
  gate = jax.nn.sigmoid((shift - sink) + log_sum)  # shift = -inf: 0, and out is 0 too
  return (out * gate).astype(out_dtype)


def sigmoid_attention(q, k, v, bias=0.0, *, query_mask=None, key_mask=None, causal=False,
                      block_size: int = DEFAULT_BLOCK) -> Array:
  """Sigmoid attention ``sigmoid(l - log(n) + b) V`` (n the row's valid keys) in query blocks.

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    bias: the offset b added to ``-log(n)``, broadcastable to ``[..., h, 1, 1]`` (one per head).
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: the number of queries per block, a positive integer.

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.
  """
  bias = jnp.asarray(bias, jnp.promote_types(q.dtype, jnp.float32))
  return _row_local_attention(
      q, k, v, lambda l, mask: weights_lib.sigmoid_weights(l + bias, None, mask),
      query_mask, key_mask, causal, block_size)


def softpick_attention(q, k, v, eps: float = 1e-6, *, query_mask=None, key_mask=None,
                       causal=False, block_size: int = DEFAULT_BLOCK) -> Array:
  """Softpick ``relu(exp(l) - 1) / (sum |exp(l) - 1| + eps) V`` in query blocks, one pass.

  Numerator and denominator are sums over one row, and a block holds its rows against every key,
  so both come from the block's logits, scaled by ``exp(-m)`` with m the row's largest valid logit
  (or 0) as in ``softpick_weights``: no running statistics across blocks are needed.

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    eps: added to the denominator, >= 0.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: the number of queries per block, a positive integer.

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.
  """
  weights_lib.check_softpick_eps(eps)
  return _row_local_attention(
      q, k, v, lambda l, mask: weights_lib.softpick_weights(l, mask, eps),
      query_mask, key_mask, causal, block_size)


def stickbreaking_attention(q, k, v, *, query_mask=None, key_mask=None, causal=False,
                            block_size: int = DEFAULT_BLOCK) -> Array:
  """Stick-breaking attention in query blocks: each block's rows hold every key, so the reverse
  cumulative sum of ``log(1 - sigmoid(l))`` over a row is ``stickbreaking_weights``' own.

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: the number of queries per block, a positive integer.

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.
  """
  return _row_local_attention(q, k, v, weights_lib.stickbreaking_weights, query_mask,
                              key_mask, causal, block_size)


def _valid_keys_per_query(key_mask, causal, n_q: int, n_k: int, dtype) -> Array:
  """The number of keys each query sees, ``[..., 1, n_q, 1]`` (broadcastable over heads)."""
  valid = jnp.ones((n_k,), dtype) if key_mask is None else key_mask.astype(dtype)
  if causal:
    count = _for_queries(jnp.cumsum(valid, axis=-1), n_q, -1)
  else:
    count = jnp.broadcast_to(jnp.sum(valid, axis=-1, keepdims=True), valid.shape[:-1] + (n_q,))
  return count[..., None, :, None]


def ssmax_attention(q, k, v, scale=1.0, *, query_mask=None, key_mask=None, causal=False,
                    block_size: int = DEFAULT_BLOCK) -> Array:
  """Scalable-Softmax ``softmax(scale * log(n) * l) V`` as softmax attention with query i scaled
  by ``scale * log(n_i)`` (n_i the keys it sees): ``(c q_i) . k_j = c (q_i . k_j)``.

  ``ssmax_weights`` scales each logit's distance from its row's top; here the queries are
  scaled, so logits within a factor ``scale * log(n)`` of the float range overflow the softmax.

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    scale: the paper's s, broadcastable to ``[..., h, 1, 1]`` (e.g. one per head).
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: the number of queries per block, a positive integer.

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.
  """
  q, k, v, out_dtype = _prepare(q, k, v, query_mask, key_mask, causal)
  count = _valid_keys_per_query(key_mask, causal, q.shape[-2], k.shape[-2], q.dtype)
  q = q * (jnp.asarray(scale, q.dtype) * jnp.log(jnp.maximum(count, 1.0)))
  blocks = _Blocks(q, query_mask, key_mask, causal, block_size)
  return _biased_softmax_attention(blocks, k, v).astype(out_dtype)


# ----- linear-time NAP and NON -----

def _for_queries(prefix: Array, n_q: int, axis: int) -> Array:
  """Statistics per key prefix -> per query: query i sees the prefix ending at key
  i + n_k - n_q, or none (zeros) where that index is negative."""
  n_k = prefix.shape[axis]
  if n_k >= n_q:
    return jax.lax.slice_in_dim(prefix, n_k - n_q, n_k, axis=axis)
  pad = [(0, 0)] * prefix.ndim
  pad[axis % prefix.ndim] = (n_q - n_k, 0)
  return jnp.pad(prefix, pad)


def _key_statistics(q, k, v, key_mask, causal):
  """Sums over the valid keys of each query (prefix sums if causal), centred at their mean.

  Returns (count, sum_kk, sum_kv, sum_v): count [..., n_q or 1, 1]; without a causal mask
  the d x d statistics have no query axis. The keys are centred at the mean of the keys each
  query sees (exact: l - mean is invariant to shifting all keys), which keeps the variance free
  of cancellation; for causal masks the prefix moments are merged pairwise (Chan et al.'s
  parallel update) by an associative scan, so every prefix is centred at its own mean.
  """
  w = _valid(key_mask, k.shape[-2], k.dtype)[..., None]         # [..., 1, n_k, 1]
  if causal:
    n, kk, kv, s_v = _prefix_moments(k, v, jnp.broadcast_to(w, k.shape[:-1] + (1,)))
    n_q = q.shape[-2]
    return (_for_queries(n, n_q, -2), _for_queries(kk, n_q, -3), _for_queries(kv, n_q, -3),
            _for_queries(s_v, n_q, -2))
  count = jnp.sum(w, axis=-2, keepdims=True)
  # shifted to the largest valid key first, so that equal keys centre to exactly 0
  ref = jax.lax.stop_gradient(jnp.max(jnp.where(w > 0, k, -jnp.inf), axis=-2, keepdims=True))
  k = (k - jnp.where(jnp.isfinite(ref), ref, 0.0)) * w
  centre = jnp.sum(k, axis=-2, keepdims=True) / jnp.maximum(count, 1.0)
  kc = (k - centre) * w
  vw = v * w
  return (count, jnp.einsum("...kd,...ke->...de", kc, kc),
          jnp.einsum("...kd,...ke->...de", kc, vw), jnp.sum(vw, axis=-2, keepdims=True))


def _prefix_moments(k, v, w):
  """Per prefix: count, sum (k - m)(k - m)^T, sum (k - m) v^T and sum v over valid keys."""
  def merge(a, b):
    n_a, mk_a, mv_a, kk_a, kv_a = a
    n_b, mk_b, mv_b, kk_b, kv_b = b
    n = n_a + n_b
    frac = n_b / jnp.maximum(n, 1.0)
    dk, dv = mk_b - mk_a, mv_b - mv_a
    cross = (n_a * frac)[..., None]                              # n_a n_b / n
    return (n, mk_a + dk * frac, mv_a + dv * frac,
            kk_a + kk_b + cross * dk[..., :, None] * dk[..., None, :],
            kv_a + kv_b + cross * dk[..., :, None] * dv[..., None, :])

  zeros_kk = jnp.zeros(k.shape + (k.shape[-1],), k.dtype)
  zeros_kv = jnp.zeros(k.shape + (v.shape[-1],), k.dtype)
  n, _, mean_v, kk, kv = jax.lax.associative_scan(
      merge, (w, k * w, v * w, zeros_kk, zeros_kv), axis=-2)
  return n, kk, kv, mean_v * n


def _contract(q, stat, causal, rhs_last: bool):
  """q_i^T S (per query i; S has a query axis only if causal) and, if ``rhs_last``, q^T S q."""
  if causal:
    out = jnp.einsum("...qd,...qde->...qe", q, stat)
    return jnp.sum(out * q, axis=-1, keepdims=True) if rhs_last else out
  out = jnp.einsum("...qd,...de->...qe", q, stat)
  return jnp.sum(out * q, axis=-1, keepdims=True) if rhs_last else out


def nap_attention(q, k, v, gain=1.0, bias=0.0, *, query_mask=None, key_mask=None,
                  causal=False, eps: float = NAP_EPSILON) -> Array:
  """NAP in O(N d^2): o_i = g q_i^T C_kv / (std_i + eps) + b S_v, with C_kv = sum (k_j - m) v_j^T
  and std_i^2 = q_i^T Cov(k) q_i over the keys query i sees; eps > 0.

  As in ``nap_weights``, the logits are first divided by a power of two: q_i by 2**a_i just above
  its largest ``|entry|``, the keys of each head by one 2**c, eps by 2**(a_i + c). The ratio is the
  same number (the scaling is exact), and the moments cannot overflow for any finite q, k.

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    gain: NAP's scale g, broadcastable to ``[..., h, 1, 1]`` (e.g. one per head).
    bias: NAP's shift b, broadcastable to ``[..., h, 1, 1]``.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    eps: added to the standard deviation of the logits (in logit units), > 0.

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.
  """
  check_nap_eps(eps)
  q, k, v, out_dtype = _prepare(q, k, v, query_mask, key_mask, causal)
  k = jnp.where(_valid(key_mask, k.shape[-2], k.dtype)[..., None] > 0, k, 0.0)  # not in the scale
  e_q = power_of_two_exponent(jnp.max(jnp.abs(q), axis=-1, keepdims=True))
  e_k = power_of_two_exponent(jnp.max(jnp.abs(k), axis=(-2, -1), keepdims=True))
  q = q * power_of_two(-e_q, q.dtype)
  k = k * power_of_two(-e_k, k.dtype)
  eps = eps * power_of_two(-e_q, q.dtype) * power_of_two(-e_k, q.dtype)  # may underflow to 0
  count, s_kk, s_kv, s_v = _key_statistics(q, k, v, key_mask, causal)
  single = count <= 1  # one key: its centred logit is exactly 0, not a rounding residue
  var = jnp.where(single, 0.0, _contract(q, s_kk, causal, rhs_last=True) / jnp.maximum(count, 1.0))
  positive = var > 0
  std = jnp.where(positive, jnp.sqrt(jnp.where(positive, var, 1.0)), 0.0)
  weighted = jnp.where(single, 0.0, _contract(q, s_kv, causal, rhs_last=False))
  gain = jnp.asarray(gain, q.dtype)
  bias = jnp.asarray(bias, q.dtype)
  den = std + eps  # 0 only for equal logits whose scaled eps underflowed
  out = jnp.where(den > 0, gain * weighted / jnp.where(den > 0, den, 1.0), 0.0) + bias * s_v
  return _finish(out, count, query_mask).astype(out_dtype)


def non_attention(q, k, v, *, query_mask=None, key_mask=None, causal=False) -> Array:
  """NON in O(N d^2): o_i = q_i^T sum_j k_j v_j^T / sqrt(n_i).

  Args:
    q: floating-point queries, shape ``[..., h, n_q, d]`` (already scaled).
    k: keys, shape ``[..., h, n_k, d]``.
    v: values, shape ``[..., h, n_k, e]``.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.

  Returns:
    The outputs, shape ``[..., h, n_q, e]`` in ``q``'s dtype; 0 for rows without a valid key.
  """
  q, k, v, out_dtype = _prepare(q, k, v, query_mask, key_mask, causal)
  w = _valid(key_mask, k.shape[-2], k.dtype)[..., None]
  kw = k * w
  if causal:
    n_q = q.shape[-2]
    count = _for_queries(jnp.cumsum(jnp.broadcast_to(w, k.shape[:-1] + (1,)), axis=-2), n_q, -2)
    s_kv = _for_queries(jnp.cumsum(kw[..., :, None] * v[..., None, :], axis=-3), n_q, -3)
  else:
    count = jnp.sum(w, axis=-2, keepdims=True)
    s_kv = jnp.einsum("...kd,...ke->...de", kw, v)
  out = _contract(q, s_kv, causal, rhs_last=False) / jnp.sqrt(jnp.maximum(count, 1.0))
  return _finish(out, count, query_mask).astype(out_dtype)


def _finish(out, count, query_mask):
  """Zero the rows of padding queries and of queries without a valid key."""
  keep = count > 0
  if query_mask is not None:
    keep = keep & query_mask[..., None, :, None]
  return jnp.where(keep, out, 0.0)
