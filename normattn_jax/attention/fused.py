"""Fused attention: the normalisations that are softmax attention with a per-key offset, run by
``jax.nn.dot_product_attention``, so that one code path runs cuDNN's flash kernel on an NVIDIA GPU
and XLA's kernel elsewhere.

* **Softmax** is the kernel itself.
* **DNAS and Sinkhorn** weights are ``softmax_j(l_ij - a_j)``: after t iterations
  ``log pi_ij = l_ij - a_j - b_i`` and the row offsets b cancel in the final row normalisation.
  DNAS's a_j is its column normalisation, ``logsumexp_i l_ij`` over the valid queries (Sinkhorn
  adds the row and column passes of its further iterations); ``fast.sinkhorn_key_offsets``
  computes them blockwise, differentiably, in O(block x N) memory. On cuDNN, DNAS's are instead
  the kernel's own log-sum-exp statistics of the keys' attention over the queries
  (``column_logsumexp``): two more fused calls in place of a loop of small kernels, about half
  the time on an H100 (BENCHMARKS.md). The offsets are folded into the head dimension rather
  than passed as a bias: q gains a column of ones and k the column ``-a_j``,
  so ``q' . k' = l_ij - a_j``. The kernel never sees a bias, so no bias gradient is needed
  (jax's cuDNN wrapper has computed it only for some bias shapes), and autodiff carries the
  offsets' gradient through k's column. In bf16/fp16 the column is split in two (the value
  rounded, then its remainder), so the offset keeps about 16 bits instead of 8.
  Where cuDNN does not take the call (float32, or no NVIDIA GPU), XLA's kernel would add the
  logit and the huge offset in one rounding, so DNAS and Sinkhorn run the exact blockwise path
  of ``fast.py`` there: the same numbers as the quadratic path at any finite logits.
* **HNAS** is ``u * DNAS + (1 - u) * softmax``: two fused calls (where cuDNN does not take the
  call, ``fast.py``'s HNAS, both halves exact).
* **Sink** is one more key with no features, a zero value and the column value ``sink``: then
  ``exp(l_j) / (exp(sink) + sum_k exp(l_k))`` exactly, with its gradient. (The kernels' log-sum-exp
  residual would give ``out * sigmoid(lse - sink)`` too, but it is returned without a gradient and
  rounded to the input dtype.) With cuDNN's causal mask, which is positional, the sink key comes
  first and a query dropped afterwards goes in front too, so that every query sees the sink.
* **Scalable-Softmax** is softmax attention with query i scaled by ``s log(n_i)``, n_i the keys it
  sees.

Layout: ``q [..., n_q, h, d]``, ``k [..., n_k, h, d]``, ``v [..., n_k, h, e]`` (the layout of
``jax.nn.dot_product_attention`` and of the modules' projections, so nothing is transposed),
logits ``q . k`` (scale q beforehand); the structured masks of ``fast.py``: ``query_mask
[..., n_q]``, ``key_mask [..., n_k]`` (True = valid) and ``causal``, aligned at the ends (query i
sees the keys j <= i + n_k - n_q); the normalisations that normalise each row alone also take a
dense boolean ``mask`` broadcastable to ``[..., h, n_q, n_k]``. A row without a valid key gives 0,
as on the quadratic path (the kernels alone would spread it evenly over the keys).

The kernel is cuDNN's where it takes the call (``kernel_for``), else XLA's, whose masks are masks:
exact at any logit. cuDNN would take a mask only as a dense bias, so there a key mask goes into
k's column too, as ``masked_logit(dtype)`` (cuDNN's own mask values): exact while
``|logits| < 2^40`` in bf16, 2^14 in fp16.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Optional

import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax.attention import fast as fast_lib
from normattn_jax.attention.causality import refuse_future_leak
from normattn_jax.kernels import platform as platform_lib
from normattn_jax.kernels import rules as kernel_rules
from normattn_jax.kernels.calls import round_up

Array = jax.Array
KERNELS = ("xla", "cudnn", "pallas")
CUDNN_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
CUDNN_MIN_COMPUTE_CAPABILITY = 8   # cuDNN's flash attention: Ampere or later
CUDNN_MAX_WIDTH = 128              # its head width on every such GPU (256 from Hopper on)
CUDNN_WIDTH_MULTIPLE = 8
MAX_KEY_COLUMNS = 2                # the offset column, split in two below float32
AUTO_MIN_KEYS = 512                # "auto" fuses from here on: below, the quadratic path was faster
PALLAS_BLOCK = 128                 # the TPU flash kernel's blocks: its lengths a multiple of them


# ----- the kernel and the path -----

# Set only inside ``tracing_for_cudnn``: the kernel choice below is made while a program is
# traced, so a program exported for another platform than this machine's must be told which
# device it is for. None: this machine's default device decides.
_TRACING_FOR_CUDNN = contextvars.ContextVar("normattn_jax_tracing_for_cudnn", default=None)


@contextlib.contextmanager
def tracing_for_cudnn(cudnn: bool = True) -> Iterator[None]:
  """Programs traced inside take cuDNN's kernel (``cudnn``) wherever it would take the call on
  an Ampere or later NVIDIA GPU, or never (``cudnn=False``), whatever this machine's devices
  are: what ``jax.export`` of a program for platform "cuda" needs on a machine without one, and
  for "tpu" on a machine with one (``cli.exports``). Never needed to run a program, where
  ``cudnn_device`` sees the device itself."""
  token = _TRACING_FOR_CUDNN.set(bool(cudnn))
  try:
    yield
  finally:
    _TRACING_FOR_CUDNN.reset(token)


def cudnn_device() -> bool:
  """Whether the default device is an NVIDIA GPU on which cuDNN's flash attention runs (or
  programs are being traced for one, ``tracing_for_cudnn``)."""
  forced = _TRACING_FOR_CUDNN.get()
  if forced is not None:
    return forced
  device = jax.devices()[0]
  if device.platform != "gpu":
    return False
  try:
    major = int(str(getattr(device, "compute_capability", "")).split(".")[0])
  except ValueError:  # not a CUDA device (e.g. ROCm)
    return False
  return major >= CUDNN_MIN_COMPUTE_CAPABILITY


def masked_logit(dtype) -> float:
  """The logit of a masked key on cuDNN, in k's column: -2^41 in bf16 (what jax's cuDNN wrapper
  adds), 0.7 of the largest fp16 number in fp16 (where -2^41 would be -inf, and -inf + inf the
  column's two parts)."""
  return max(-2.0 ** 41, -0.7 * float(jnp.finfo(dtype).max))


def kernel_for(dtype, width: int, *, dense_mask: bool = False,
               causal_unequal: bool = False) -> str:
  """The kernel of a fused call: cuDNN's where it takes the call; on a TPU (a program traced
  for one, ``kernels.platform``) jax's Pallas flash attention
  (``jax.experimental.pallas.ops.tpu.flash_attention``), which ``jax.nn.dot_product_attention``
  does not offer there, where it takes the call; else XLA's.

  Args:
    dtype: the dtype of q, k and v (cuDNN takes bf16 and fp16 only).
    width: the head width the kernel would see before padding (the widest of q and k with the
      offset columns, and v).
    dense_mask: the call has a dense mask (cuDNN would take it only as a dense bias).
    causal_unequal: causal with queries and keys of different lengths (cuDNN's causal mask
      aligns them at the start, this library's at the end).

  Returns:
    "cudnn", "pallas" or "xla" (one of ``KERNELS``).
  """
  if (cudnn_device() and jnp.dtype(dtype) in CUDNN_DTYPES and not dense_mask
      and not causal_unequal and round_up(width, CUDNN_WIDTH_MULTIPLE) <= CUDNN_MAX_WIDTH):
    return "cudnn"
  if platform_lib.target().platform == "tpu" and not dense_mask and not causal_unequal:
    return "pallas"
  return "xla"


def blockers(norm, *, dense_mask: bool, sow_weights: bool, dropout: bool) -> list:
  """What a call has that the fused path cannot take: the weights are never formed (no
  ``sow_weights``, no attention dropout), and a normalisation that also normalises over the
  queries computes its key offsets from the structured masks (no dense mask).

  Args:
    norm: the registered ``Normalization``.
    dense_mask: a dense mask is given.
    sow_weights: the weights are to be stored.
    dropout: attention dropout is active.

  Returns:
    The names of the blockers, empty if none.
  """
  return [name for name, present in (
      (f"a dense mask (normalization {norm.name!r} takes query_mask/key_mask/causal)",
       dense_mask and norm.normalizes_over_queries),
      ("sow_weights", sow_weights), ("attention dropout", dropout)) if present]


def takes_fused_path(norm, implementation: str, call_blockers, dtype, head_dim: int, *,
                     num_keys: int, value_dim: int = 0, dense_mask: bool = False,
                     causal_unequal: bool = False, structured: str = "structured masks") -> bool:
  """Whether a call takes the fused path: always for "fused" (refusing what it cannot take),
  for "auto" where nothing blocks it and ``auto_fuses`` says so, never otherwise.

  Args:
    norm: the registered ``Normalization``.
    implementation: the module's implementation ("auto", "quadratic", "fast" or "fused").
    call_blockers: ``blockers(...)`` of this call, and any the module adds.
    dtype: the dtype of q, k and v.
    head_dim: the width of each head's queries and keys.
    num_keys: the number of keys each query is scored against.
    value_dim: the width of each head's values (0: at most ``head_dim``).
    dense_mask: the call has a dense mask.
    causal_unequal: causal with queries and keys of different lengths.
    structured: the masks the caller can pass instead, for the error message.

  Returns:
    True to take the fused path.

  Raises:
    ValueError: for implementation="fused" where the normalisation has no fused path or a
      blocker is present.
  """
  if implementation == "fused":
    if norm.fused is None:
      raise ValueError(f"normalization {norm.name!r} has no fused path (implementation="
                       f"'fused'); use implementation='quadratic', 'fast' or 'auto'")
    if call_blockers:
      raise ValueError(f"implementation='fused' never forms the weights, so it cannot take "
                       f"{', '.join(call_blockers)}; pass {structured} or use "
                       f"implementation='quadratic'")
    return True
  if implementation != "auto" or call_blockers or norm.fused is None:
    return False
  kernel = kernel_for(dtype, max(head_dim + MAX_KEY_COLUMNS, value_dim), dense_mask=dense_mask,
                      causal_unequal=causal_unequal)
  return auto_fuses(norm, kernel, dtype, head_dim, num_keys)


def auto_fuses(norm, kernel: str, dtype, head_dim: int, num_keys: int) -> bool:
  """"auto"'s rule for a call nothing blocks: where the kernel rules (``kernels.rules``) hold a
  measurement of the fused path against the path "auto" takes without it (the quadratic one,
  or NAP's and NON's linear one) on this kind of device at this normalisation, dtype, key count
  and head width, whether the fused path was faster there;
  elsewhere, from ``AUTO_MIN_KEYS`` keys on where the kernel is one of the normalisation's
  ``fused_auto_kernels`` (cuDNN's for softmax, DNAS, HNAS, sink and Scalable-Softmax; on a CPU
  XLA's fused kernel is the quadratic computation and "auto" keeps today's paths). (On an H100
  and an H200, single models in training: cuDNN's softmax took 0.76-0.97x the quadratic path's
  speed at 128 and 256 keys, DNAS and HNAS 0.55-0.75x; from 512 on all three were faster on the
  H100, DNAS with its offsets from cuDNN: BENCHMARKS.md. A grid's many small models may differ,
  which the GPU queue measures: ``benchmarks/kernel_speed.py``.)

  Args:
    norm: the registered ``Normalization`` (with a fused path).
    kernel: ``kernel_for`` of the call.
    dtype: the dtype of q, k and v.
    head_dim: the width of each head's queries and keys.
    num_keys: the number of keys each query is scored against.

  Returns:
    True to take the fused path.
  """
  faster = kernel_rules.faster("fused_attention", normalization=norm.name,
                               dtype=jnp.dtype(dtype).name, num_keys=int(num_keys),
                               head_dim=int(head_dim))
  if faster is not None:
    return faster
  return num_keys >= AUTO_MIN_KEYS and kernel in norm.fused_auto_kernels


# ----- checks and layout -----

def _check(q, k, v, mask, query_mask, key_mask) -> None:
  for name, x in (("q", q), ("k", k), ("v", v)):
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise TypeError(f"{name} must be floating point, got dtype {x.dtype}")
  if q.ndim < 3 or k.ndim != q.ndim or v.ndim != q.ndim:
    raise ValueError(f"q, k, v must share their rank (>= 3), got {q.shape}, {k.shape}, {v.shape}")
  if (k.shape[:-3] != q.shape[:-3] or k.shape[-2:] != q.shape[-2:]
      or v.shape[:-1] != k.shape[:-1]):
    raise ValueError(f"incompatible shapes q {q.shape}, k {k.shape}, v {v.shape} (expected "
                     f"[..., n_q, h, d], [..., n_k, h, d], [..., n_k, h, e])")
  if q.shape[-3] == 0 or k.shape[-3] == 0:
    raise ValueError(f"need at least one query and one key, got q of shape {q.shape} and k of "
                     f"shape {k.shape}")
  for name, m, length in (("query_mask", query_mask, q.shape[-3]),
                          ("key_mask", key_mask, k.shape[-3])):
    if m is not None and (m.dtype != jnp.bool_ or m.shape[-1] != length):
      raise ValueError(f"{name} must be boolean [..., {length}] (True = valid), got dtype "
                       f"{m.dtype} and shape {m.shape}")
  if mask is not None:
    target = q.shape[:-3] + (q.shape[-2], q.shape[-3], k.shape[-3])
    if mask.dtype != jnp.bool_:
      raise ValueError(f"mask must be boolean (True = attend), got dtype {mask.dtype}")
    try:
      fits = np.broadcast_shapes(mask.shape, target) == target
    except ValueError:
      fits = False
    if not fits:
      raise ValueError(f"mask of shape {mask.shape} does not broadcast to {target}")


def _batch_flat(x: Optional[Array], lead: tuple, tail: tuple) -> Optional[Array]:
  """``x`` broadcast to ``lead + tail`` with the lead axes flattened into one (None stays)."""
  if x is None:
    return None
  return jnp.broadcast_to(x, lead + tail).reshape((-1,) + tail)


def _dense_flat(mask: Optional[Array], lead: tuple, n_q: int, n_k: int) -> Optional[Array]:
  """A dense mask as ``[batch or 1, heads or 1, n_q, n_k]`` (the kernels' 4-d form)."""
  if mask is None:
    return None
  heads = mask.shape[-3] if mask.ndim >= 3 else 1
  mask_lead = mask.shape[:-3] if mask.ndim > 3 else ()
  if int(np.prod(mask_lead, dtype=int)) == 1:
    return jnp.broadcast_to(mask, (heads, n_q, n_k))[None]
  return _batch_flat(mask, lead, (heads, n_q, n_k))


def _causal(n_q: int, n_k: int) -> Array:
  """Query i sees the keys j <= i + n_k - n_q."""
  return jnp.tril(jnp.ones((n_q, n_k), bool), n_k - n_q)


def _visible_keys(mask, key_mask, causal: bool, n_q: int, n_k: int) -> Array:
  """The number of valid keys each query sees, ``[batch or 1, n_q, heads or 1]`` (float32),
  from the flattened masks: O(N) without a dense mask."""
  if mask is not None:
    full = mask
    if key_mask is not None:
      full = full & key_mask[:, None, None, :]
    if causal:
      full = full & _causal(n_q, n_k)
    return jnp.swapaxes(jnp.sum(full, axis=-1, dtype=jnp.float32), -1, -2)
  valid = jnp.ones((1, n_k), jnp.float32) if key_mask is None else key_mask.astype(jnp.float32)
  if not causal:
    return jnp.broadcast_to(jnp.sum(valid, -1)[:, None, None], (valid.shape[0], n_q, 1))
  prefix = jnp.cumsum(valid, axis=-1)
  last = jnp.arange(n_q) + n_k - n_q  # the last key query i sees
  seen = jnp.where(last >= 0, prefix[:, jnp.clip(last, 0, n_k - 1)], 0.0)
  return seen[..., None]


def _column_count(dtype) -> int:
  """Columns that carry a float32 value in ``dtype``: 1, or 2 below float32's precision."""
  return 1 if jnp.finfo(dtype).nmant >= jnp.finfo(jnp.float32).nmant else 2


def _column_parts(values: Array, dtype) -> list:
  """``values`` (float32 or wider) as ``_column_count(dtype)`` columns of ``dtype`` that sum back
  to them: the rounded value, then (below float32) the remainder.

  The rounding is ``lax.reduce_precision``, not a cast there and back, which XLA's GPU compiler
  may drop as excess precision (it allows that by default), leaving no remainder."""
  if _column_count(dtype) == 1:
    return [values.astype(dtype)]
  info = jnp.finfo(dtype)
  hi = jax.lax.reduce_precision(values, exponent_bits=info.nexp, mantissa_bits=info.nmant)
  return [hi.astype(dtype), (values - hi).astype(dtype)]


def _pad_width(x: Array, width: int) -> Array:
  return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, width - x.shape[-1])])


# ----- the one fused call -----

def attention(q, k, v, *, key_offsets=None, sink=None, mask=None, query_mask=None,
              key_mask=None, causal: bool = False) -> Array:
  """``softmax_j(q_i . k_j - key_offsets_j) V``, with an optional sink, by one fused call.

  On XLA's kernel every mask is one dense mask (XLA's own causal mask is a dense one too); on
  cuDNN's, whose masks would be dense biases, a key mask goes into k's column and ``causal`` is
  the kernel's (``kernel_for`` leaves dense masks and unequal causal lengths to XLA), and an odd
  length gets one masked key and one dropped query (its training kernel takes even lengths).
  The TPU's Pallas flash kernel takes its masks and causal mask as cuDNN's does, and lengths of
  whole blocks (``PALLAS_BLOCK``): masked keys and dropped queries fill them up.

  Args:
    q: floating-point queries, shape ``[..., n_q, h, d]`` (already scaled).
    k: keys, shape ``[..., n_k, h, d]``.
    v: values, shape ``[..., n_k, h, e]``.
    key_offsets: subtracted from each key's logits, ``[..., n_k, h]``; None: 0.
    sink: the sink logit per head, broadcastable to ``[h]``; None: no sink.
    mask: dense boolean mask broadcastable to ``[..., h, n_q, n_k]``, True = attend; or None.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.

  Returns:
    The outputs ``[..., n_q, h, e]`` in the inputs' dtype; 0 for rows without a valid key.
  """
  _check(q, k, v, mask, query_mask, key_mask)
  dtype = jnp.result_type(q, k, v)
  compute = jnp.promote_types(dtype, jnp.float32)
  lead, (n_q, h, d), n_k, e = q.shape[:-3], q.shape[-3:], k.shape[-3], v.shape[-1]
  q, k, v = (_batch_flat(x.astype(dtype), lead, x.shape[-3:]) for x in (q, k, v))
  batch = q.shape[0]
  query_mask = _batch_flat(query_mask, lead, (n_q,))
  key_mask = _batch_flat(key_mask, lead, (n_k,))
  mask = _dense_flat(mask, lead, n_q, n_k)
  needs_column = key_offsets is not None or sink is not None
  # cuDNN's training kernel takes even lengths only: an odd one gets a masked key (in k's column)
  odd_keys = (n_k + (sink is not None)) % 2 == 1
  columns = _column_count(dtype) * (needs_column or key_mask is not None or odd_keys)
  kernel = kernel_for(dtype, max(d + columns, e), dense_mask=mask is not None,
                      causal_unequal=causal and n_q != n_k)
  cudnn = kernel == "cudnn"
  in_column = kernel != "xla"  # cuDNN's and the Pallas kernel: key masks in k's column

  # the logit each key adds (-offset; a masked key's on cuDNN), then the sink key in front
  column = (jnp.zeros((batch, n_k, h), compute) if key_offsets is None
            else -_batch_flat(key_offsets, lead, (n_k, h)).astype(compute))
  dense = None
  if in_column and key_mask is not None:
    column = jnp.where(key_mask[..., None], column, masked_logit(dtype))
    needs_column = True
  elif not in_column:
    for part in (mask, None if key_mask is None else key_mask[:, None, None, :],
                 _causal(n_q, n_k) if causal else None):
      if part is not None:
        dense = part if dense is None else dense & part
  front = 0  # queries put in front of the real ones
  if sink is not None:
    sink_column = jnp.broadcast_to(jnp.asarray(sink, compute), (h,))
    column = jnp.concatenate([jnp.broadcast_to(sink_column, (batch, 1, h)), column], axis=1)
    k = jnp.concatenate([jnp.zeros((batch, 1, h, d), dtype), k], axis=1)
    v = jnp.concatenate([jnp.zeros((batch, 1, h, e), dtype), v], axis=1)
    if dense is not None:
      dense = jnp.concatenate([jnp.ones(dense.shape[:-1] + (1,), bool), dense], axis=-1)
    if in_column and causal:  # the kernel's causal mask then lets query i see the sink
      front = 1
      q = jnp.concatenate([jnp.zeros((batch, 1, h, d), dtype), q], axis=1)
  # masked keys, and (causal lengths stay equal) queries, at the end: one where cuDNN's length
  # is odd, up to whole blocks on the Pallas kernel
  multiple = {"cudnn": 2, "pallas": PALLAS_BLOCK}.get(kernel, 1)
  extra_keys = round_up(k.shape[1], multiple) - k.shape[1]
  if extra_keys:
    column = jnp.concatenate(
        [column, jnp.full((batch, extra_keys, h), masked_logit(dtype), compute)], 1)
    k, v = (jnp.concatenate([x, jnp.zeros((batch, extra_keys) + x.shape[2:], dtype)], 1)
            for x in (k, v))
    needs_column = True
  extra_queries = round_up(q.shape[1], multiple) - q.shape[1]
  if extra_queries:
    q = jnp.concatenate([q, jnp.zeros((batch, extra_queries, h, d), dtype)], axis=1)
  if needs_column:
    columns = _column_parts(column, dtype)
    q = jnp.concatenate([q, jnp.ones(q.shape[:-1] + (len(columns),), dtype)], axis=-1)
    k = jnp.concatenate([k, jnp.stack(columns, axis=-1)], axis=-1)
  width = max(q.shape[-1], e)
  if cudnn:
    width = round_up(width, CUDNN_WIDTH_MULTIPLE)
  if kernel == "pallas" and width > PALLAS_BLOCK:  # the kernel's head width: whole lanes
    width = round_up(width, PALLAS_BLOCK)
  q, k, v = (_pad_width(x, width) for x in (q, k, v))

  if kernel == "pallas":
    out = pallas_flash_attention(q, k, v, causal=causal)
  else:
    out = jax.nn.dot_product_attention(q, k, v, mask=dense, scale=1.0,
                                       is_causal=cudnn and causal, implementation=kernel)
  out = out[:, front:front + n_q, :, :e]
  valid = _visible_keys(mask, key_mask, causal, n_q, n_k) > 0
  if query_mask is not None:
    valid = valid & query_mask[..., None]
  out = jnp.where(valid[..., None], out, jnp.zeros((), out.dtype))
  return out.reshape(lead + (n_q, h, e)).astype(dtype)


def pallas_flash_attention(q: Array, k: Array, v: Array, *, causal: bool) -> Array:
  """``softmax(q k^T) v`` by jax's Pallas flash attention for TPUs, through its public API
  (``jax.experimental.pallas.ops.tpu.flash_attention``), in the fused layout.

  Args:
    q: ``[batch, n_q, h, w]``, n_q a multiple of ``PALLAS_BLOCK``.
    k: ``[batch, n_k, h, w]``, n_k a multiple of ``PALLAS_BLOCK`` (n_k == n_q when causal).
    v: ``[batch, n_k, h, w]`` (the kernel takes one width for all three).
    causal: query i sees the keys j <= i (aligned at the start).

  Returns:
    ``[batch, n_q, h, w]``, differentiable (the kernel's own backward kernels).
  """
  from jax.experimental.pallas.ops.tpu import flash_attention as tpu_flash
  heads_first = lambda x: jnp.swapaxes(x, 1, 2)
  block_q, block_k = min(q.shape[1], PALLAS_BLOCK), min(k.shape[1], PALLAS_BLOCK)
  sizes = tpu_flash.BlockSizes(
      block_q=block_q, block_k_major=block_k, block_k=block_k, block_b=1,
      block_q_major_dkv=block_q, block_k_major_dkv=block_k, block_k_dkv=block_k,
      block_q_dkv=block_q, block_k_major_dq=block_k, block_k_dq=block_k, block_q_dq=block_q)
  out = tpu_flash.flash_attention(heads_first(q), heads_first(k), heads_first(v),
                                  causal=causal, sm_scale=1.0, block_sizes=sizes)
  return heads_first(out)


# ----- the normalisations -----

def softmax_attention(q, k, v, *, mask=None, query_mask=None, key_mask=None, causal=False,
                      block_size: int = fast_lib.DEFAULT_BLOCK) -> Array:
  """Softmax attention through the fused kernel.

  Args:
    q: floating-point queries, shape ``[..., n_q, h, d]`` (already scaled).
    k: keys, shape ``[..., n_k, h, d]``.
    v: values, shape ``[..., n_k, h, e]``.
    mask: dense boolean mask broadcastable to ``[..., h, n_q, n_k]``; or None.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: unused (the fused kernel tiles itself); taken as every fused path does.

  Returns:
    The outputs ``[..., n_q, h, e]`` in the inputs' dtype; 0 for rows without a valid key.
  """
  del block_size
  return attention(q, k, v, mask=mask, query_mask=query_mask, key_mask=key_mask,
                   causal=causal)


def sink_attention(q, k, v, sink, *, mask=None, query_mask=None, key_mask=None, causal=False,
                   block_size: int = fast_lib.DEFAULT_BLOCK) -> Array:
  """Softmax with an attention sink: the sink as one more key of logit ``sink`` and value 0.

  Args:
    q: floating-point queries, shape ``[..., n_q, h, d]`` (already scaled).
    k: keys, shape ``[..., n_k, h, d]``.
    v: values, shape ``[..., n_k, h, e]``.
    sink: the sink logit, broadcastable to ``[h]`` (one per head).
    mask: dense boolean mask broadcastable to ``[..., h, n_q, n_k]``; or None.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: unused (the fused kernel tiles itself).

  Returns:
    The outputs ``[..., n_q, h, e]`` in the inputs' dtype; 0 for rows without a valid key.
  """
  del block_size
  return attention(q, k, v, sink=sink, mask=mask, query_mask=query_mask, key_mask=key_mask,
                   causal=causal)


def ssmax_attention(q, k, v, scale, *, mask=None, query_mask=None, key_mask=None, causal=False,
                    block_size: int = fast_lib.DEFAULT_BLOCK) -> Array:
  """Scalable-Softmax ``softmax(scale * log(n_i) * l) V``: softmax attention with query i scaled
  by ``scale * log(n_i)``, n_i the valid keys it sees (at least 1).

  Args:
    q: floating-point queries, shape ``[..., n_q, h, d]`` (already scaled).
    k: keys, shape ``[..., n_k, h, d]``.
    v: values, shape ``[..., n_k, h, e]``.
    scale: the paper's s, broadcastable to ``[h]`` (one per head).
    mask: dense boolean mask broadcastable to ``[..., h, n_q, n_k]``; or None.
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: unused (the fused kernel tiles itself).

  Returns:
    The outputs ``[..., n_q, h, e]`` in the inputs' dtype; 0 for rows without a valid key.
  """
  del block_size
  _check(q, k, v, mask, query_mask, key_mask)
  lead, n_q, n_k = q.shape[:-3], q.shape[-3], k.shape[-3]
  seen = _visible_keys(_dense_flat(mask, lead, n_q, n_k), _batch_flat(key_mask, lead, (n_k,)),
                       causal, n_q, n_k)                             # [batch or 1, n_q, h or 1]
  seen = seen.reshape((lead if seen.shape[0] > 1 else (1,) * len(lead)) + seen.shape[1:])
  compute = jnp.promote_types(q.dtype, jnp.float32)
  factor = jnp.asarray(scale, compute) * jnp.log(jnp.maximum(seen, 1.0)).astype(compute)
  scaled = (q.astype(compute) * factor[..., None]).astype(q.dtype)
  return attention(scaled, k, v, mask=mask, query_mask=query_mask, key_mask=key_mask,
                   causal=causal)


def _key_statistics_kernel(q, k, causal: bool) -> str:
  """The kernel of the calls that give DNAS's key offsets as the row statistics of the keys'
  attention over the queries (``column_logsumexp``): each side gains a column of ones beside
  one of offsets, and a causal call needs equal lengths."""
  return kernel_for(jnp.result_type(q, k), q.shape[-1] + 2,
                    causal_unequal=causal and q.shape[-3] != k.shape[-3])


def _seeing_queries(query_mask, causal: bool, n_q: int, n_k: int) -> Array:
  """The number of valid queries that see each key, ``[batch or 1, n_k, 1]``: the visible keys
  of the swapped problem, both sequences reversed (query i sees key j iff i >= j - n_k + n_q)."""
  flipped = None if query_mask is None else query_mask[:, ::-1]
  return _visible_keys(None, flipped, causal, n_k, n_q)[:, ::-1]


def column_logsumexp(q, k, *, query_mask=None, causal: bool = False) -> Array:
  """DNAS's key offsets ``a_j = logsumexp_i l_ij`` over the valid queries, as the row
  statistics (log-sum-exp) of the keys' attention over the queries: q and k swapped, and for a
  causal call both reversed, so that the kernel's causal mask is the transposed one.

  The statistics come back rounded to the inputs' dtype, so a first call gives them roughly and
  a second, with that estimate subtracted in a query column, gives the small remainder. The
  gradient ``da_j = sum_i P_ij (k_j . dq_i + q_i . dk_j)``, P the column-normalised weights, is
  carried by the second call's outputs ``o_j = sum_i P_ij q_i`` (its values are q, its queries
  and keys constants): ``a = lse + k . o - stop_gradient(k . o)`` has it exactly.

  Args:
    q: queries ``[batch, n_q, h, d]`` in bf16 or fp16 (already scaled).
    k: keys ``[batch, n_k, h, d]``, same dtype; with ``causal``, n_k == n_q.
    query_mask: boolean ``[batch, n_q]``, True = valid query; None: all valid.
    causal: query i sees only the keys j <= i.

  Returns:
    ``a [batch, n_k, h]`` in float32, differentiable; 0 for a key no query sees.
  """
  dtype, compute = q.dtype, jnp.promote_types(q.dtype, jnp.float32)
  (batch, n_q, h, d), n_k = q.shape, k.shape[1]
  masked = masked_logit(dtype)
  key_column = jnp.zeros((batch, n_q, h), compute)
  if query_mask is not None:
    key_column = jnp.where(query_mask[..., None], key_column, masked)
  rows, cols, values = jax.lax.stop_gradient(k), jax.lax.stop_gradient(q), q
  if causal:
    rows, cols, values, key_column = (x[:, ::-1] for x in (rows, cols, values, key_column))
  # the training kernel takes even lengths: a masked key and a dropped query where odd
  if n_q % 2:
    cols, values = (jnp.concatenate([x, jnp.zeros((batch, 1, h, d), dtype)], 1)
                    for x in (cols, values))
    key_column = jnp.concatenate([key_column, jnp.full((batch, 1, h), masked, compute)], 1)
  if n_k % 2:
    rows = jnp.concatenate([rows, jnp.zeros((batch, 1, h, d), dtype)], 1)
  width = round_up(d + 2, CUDNN_WIDTH_MULTIPLE)
  ones = lambda x: jnp.ones(x.shape[:-1] + (1,), dtype)
  keys = _pad_width(jnp.concatenate([cols, ones(cols), key_column[..., None].astype(dtype)],
                                    -1), width)
  values = _pad_width(values, width)

  def statistics(estimate):  # the rows' log-sum-exp less ``estimate``, and the outputs
    query_column = (-estimate)[..., None].astype(dtype)
    queries = _pad_width(jnp.concatenate([rows, query_column, ones(rows)], -1), width)
    out, lse = jax.nn.dot_product_attention(queries, keys, values, scale=1.0, is_causal=causal,
                                            implementation="cudnn", return_residual=True)
    return out, lse.astype(compute)

  seen = _seeing_queries(query_mask, causal, n_q, n_k) > 0      # [batch or 1, n_k, 1]
  seen_rows = seen[:, ::-1] if causal else seen
  if n_k % 2:
    seen_rows = jnp.concatenate([seen_rows, jnp.zeros_like(seen_rows[:, :1])], 1)
  _, rough = statistics(jnp.zeros((batch, rows.shape[1], h), compute))
  # rounded to ``dtype`` here, so that the column holds exactly what is added back (the
  # kernel's rounding is a cast that XLA's GPU compiler may drop as excess precision)
  info = jnp.finfo(dtype)
  estimate = jax.lax.stop_gradient(jax.lax.reduce_precision(
      jnp.where(seen_rows, rough, 0.0), exponent_bits=info.nexp, mantissa_bits=info.nmant))
  out, remainder = statistics(estimate)
  lse = (estimate + jax.lax.stop_gradient(remainder))[:, :n_k]
  out = out[:, :n_k, :, :d]
  if causal:
    lse, out = lse[:, ::-1], out[:, ::-1]
  moved = (jnp.sum(k.astype(compute) * jax.lax.stop_gradient(out).astype(compute), -1)
           + jnp.sum(jax.lax.stop_gradient(k).astype(compute) * out.astype(compute), -1))
  return jnp.where(seen, lse + moved - jax.lax.stop_gradient(moved), 0.0)


def _offsets_kernel(q, k, v, causal: bool) -> str:
  """The kernel of the call that adds key offsets (DNAS, HNAS, Sinkhorn) in k's column."""
  dtype = jnp.result_type(q, k, v)
  return kernel_for(dtype, max(q.shape[-1] + _column_count(dtype), v.shape[-1]),
                    causal_unequal=causal and q.shape[-3] != k.shape[-3])


def _by_fast_path(fast_fn, q, k, v, *args, **kwargs) -> Array:
  """``fast_fn`` (a ``fast.py`` function, heads first) on the fused layout ``[..., n, h, d]``.

  Where cuDNN does not take a call with key offsets, XLA's kernel would add the logit and the
  huge offset in one rounding (``l - a`` at ``|l| ~ 1e8`` loses the offset's log-sum, which
  decides ties); it forms the logits anyway, so the exact blockwise path of ``fast.py``, which
  keeps the offsets' parts apart, serves those calls instead.
  """
  out = fast_fn(_heads_first(q), _heads_first(k), _heads_first(v), *args, **kwargs)
  return _heads_first(out)


def _heads_first(x: Array) -> Array:
  """``[..., n, h, d] <-> [..., h, n, d]``: the fused layout and ``fast.py``'s."""
  return jnp.swapaxes(x, -2, -3)


def _refuse_dense_mask(name: str, mask) -> None:
  if mask is not None:
    raise ValueError(f"normalization {name!r} also normalises over the queries: its fused path "
                     f"computes the key offsets from query_mask, key_mask and causal, and takes "
                     f"no dense mask")


def sinkhorn_attention(q, k, v, num_iters: int, *, mask=None, query_mask=None, key_mask=None,
                       causal=False, block_size: int = fast_lib.DEFAULT_BLOCK,
                       allow_future_leak: bool = False) -> Array:
  """``num_iters`` Sinkhorn iterations: their key offsets (2 num_iters - 1 blockwise passes; for
  one iteration on cuDNN, the kernel's own statistics, ``column_logsumexp``), then one fused
  softmax call with the offsets in k's column.

  Args:
    q: floating-point queries, shape ``[..., n_q, h, d]`` (already scaled).
    k: keys, shape ``[..., n_k, h, d]``.
    v: values, shape ``[..., n_k, h, e]``.
    num_iters: the number of Sinkhorn iterations, a positive integer.
    mask: must be None (the offsets take the structured masks).
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: queries per block of the offset passes.
    allow_future_leak: compute a causal call anyway: it normalises over the queries, so the
      output at a position then depends on the later positions (refused without it).

  Returns:
    The outputs ``[..., n_q, h, e]`` in the inputs' dtype; 0 for rows without a valid key.

  Raises:
    ValueError: for a dense mask, or ``causal`` without ``allow_future_leak``.
  """
  _refuse_dense_mask("sinkhorn", mask)
  refuse_future_leak("sinkhorn", causal, allow_future_leak)
  _check(q, k, v, mask, query_mask, key_mask)
  if _offsets_kernel(q, k, v, causal) == "xla":  # exact where XLA's kernel would round
    return _by_fast_path(fast_lib.sinkhorn_attention, q, k, v, num_iters,
                         query_mask=query_mask, key_mask=key_mask, causal=causal,
                         block_size=block_size, allow_future_leak=True)
  if num_iters == 1 and _key_statistics_kernel(q, k, causal) == "cudnn":
    lead, dtype = q.shape[:-3], jnp.result_type(q, k)
    flat = [_batch_flat(x.astype(dtype), lead, x.shape[-3:]) for x in (q, k)]
    offsets = column_logsumexp(*flat, query_mask=_batch_flat(query_mask, lead, q.shape[-3:-2]),
                               causal=causal).reshape(lead + k.shape[-3:-1])
  else:
    offsets = jnp.swapaxes(fast_lib.sinkhorn_key_offsets(
        _heads_first(q), _heads_first(k), num_iters, query_mask=query_mask, key_mask=key_mask,
        causal=causal, block_size=block_size), -1, -2)
  return attention(q, k, v, key_offsets=offsets, query_mask=query_mask, key_mask=key_mask,
                   causal=causal)


def dnas_attention(q, k, v, *, mask=None, query_mask=None, key_mask=None, causal=False,
                   block_size: int = fast_lib.DEFAULT_BLOCK,
                   allow_future_leak: bool = False) -> Array:
  """DNAS: softmax attention with the key offsets ``a_j = logsumexp_i l_ij`` (one column pass).

  Args:
    q: floating-point queries, shape ``[..., n_q, h, d]`` (already scaled).
    k: keys, shape ``[..., n_k, h, d]``.
    v: values, shape ``[..., n_k, h, e]``.
    mask: must be None (the offsets take the structured masks).
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: queries per block of the column pass.
    allow_future_leak: compute a causal call anyway: it normalises over the queries, so the
      output at a position then depends on the later positions (refused without it).

  Returns:
    The outputs ``[..., n_q, h, e]`` in the inputs' dtype; 0 for rows without a valid key.

  Raises:
    ValueError: for a dense mask, or ``causal`` without ``allow_future_leak``.
  """
  _refuse_dense_mask("dnas", mask)
  refuse_future_leak("dnas", causal, allow_future_leak)
  return sinkhorn_attention(q, k, v, 1, mask=mask, query_mask=query_mask, key_mask=key_mask,
                            causal=causal, block_size=block_size, allow_future_leak=True)


def hnas_attention(q, k, v, u, *, mask=None, query_mask=None, key_mask=None, causal=False,
                   block_size: int = fast_lib.DEFAULT_BLOCK,
                   allow_future_leak: bool = False) -> Array:
  """HNAS: ``u * DNAS-out + (1 - u) * softmax-out``, two fused calls.

  Args:
    q: floating-point queries, shape ``[..., n_q, h, d]`` (already scaled).
    k: keys, shape ``[..., n_k, h, d]``.
    v: values, shape ``[..., n_k, h, e]``.
    u: the DNAS share, in [0, 1], broadcastable to ``[h]`` (one per head).
    mask: must be None (DNAS's offsets take the structured masks).
    query_mask: boolean ``[..., n_q]``, True = valid query; None: all valid.
    key_mask: boolean ``[..., n_k]``, True = valid key; None: all valid.
    causal: query i sees only the keys j <= i + n_k - n_q.
    block_size: queries per block of DNAS's column pass.
    allow_future_leak: compute a causal call anyway: it normalises over the queries, so the
      output at a position then depends on the later positions (refused without it).

  Returns:
    The outputs ``[..., n_q, h, e]`` in the inputs' dtype; 0 for rows without a valid key.

  Raises:
    ValueError: for a dense mask, or ``causal`` without ``allow_future_leak``.
  """
  _refuse_dense_mask("hnas", mask)
  refuse_future_leak("hnas", causal, allow_future_leak)
  kwargs = dict(query_mask=query_mask, key_mask=key_mask, causal=causal)
  if _offsets_kernel(q, k, v, causal) == "xla":  # both halves exact, as DNAS's alone
    return _by_fast_path(fast_lib.hnas_attention, q, k, v, jnp.asarray(u)[..., None, None],
                         block_size=block_size, allow_future_leak=True, **kwargs)
  u = jnp.asarray(u, jnp.promote_types(q.dtype, jnp.float32))[..., None]  # [h, 1]
  out = (u * dnas_attention(q, k, v, block_size=block_size, allow_future_leak=True, **kwargs)
         + (1 - u) * softmax_attention(q, k, v, **kwargs))
  return out.astype(jnp.result_type(q, k, v))
