"""NAP's and NON's attention as Pallas kernels: the N x N logits and weights of a head live only
in the kernels, never in memory.

Three kernels, each gridded over (batch, head, block):

- forward, over blocks of query rows: the block's logits against every key of its head, their
  statistics over the valid keys of each row (NAP's mean and standard deviation, NON's count),
  the weights and their sum over the values;
- backward over query rows: the same rows again, the weights' gradient and through it the
  queries' gradient, and for each row the few numbers (``COEFFICIENTS``) that turn any tile of
  its weights' gradient into its logits' gradient, as flash attention's backward keeps a row's
  log-sum-exp;
- backward over key blocks: the keys' and values' gradients, summed over every query block's
  tile of logits, recomputed (no program adds to another's output, so nothing races on a GPU).

On a GPU the products with keys, values and queries go a chunk of features at a time and the
key blocks are a few rows, so a program holds tens of KiB whatever the head's width (an H100's
or H200's block may take 227 KiB of shared memory: ``benchmarks/triton_resources.py``); on a
TPU a head's keys and features stay whole in VMEM. Each row's statistics need all of its
keys, so a row block holds ``[rows, keys]`` logits: the kernels are for sequences of up to
``MAX_KEYS`` keys; beyond about two head widths the linear-time paths (``attention.fast``) form
no N x N array either and take far fewer FLOPs.

The arithmetic is ``attention.weights.nap_weights``' (and ``non_weights``'), in float32: each row
scaled by a power of two above its largest ``|logit|`` (exact), its largest valid logit taken
off, then ``gain * (l - mean) / (std + eps) + bias`` over its valid keys; the weights rounded to
the values' dtype before their product with the values, as the quadratic path's weights are.
Masks are the structured ones (query and key masks, causal: query i sees the keys
j <= i + n_k - n_q) and, where given, a dense one. Lengths and widths are padded to powers of two
of at least 16 (Triton's blocks) with invalid keys and queries and zero features, which change no
real output or gradient.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from normattn_jax.kernels import platform as platform_lib
from normattn_jax.kernels.calls import next_power_of_two, pad_to, pallas

Array = jax.Array
KINDS = ("nap", "non")
MAX_KEYS = 2048   # a block of query rows holds its logits against every key
# What the backward over query rows leaves for each row, in this order (the last two are the
# row's terms of the gain's and the bias's gradients).
COEFFICIENTS = ("scale", "top", "mean", "alpha", "beta", "gamma", "d_gain", "d_bias")
# Elements of float32 a GPU program's blocks may take: a block of query rows' logits, a chunk
# of keys, a key block's gradients (Triton keeps blocks in registers and shared memory).
ROW_ELEMENTS, CHUNK_ELEMENTS, GRADIENT_ELEMENTS = 4096, 8192, 8192


@dataclasses.dataclass(frozen=True)
class Blocks:
  """Block sizes: query rows per program (forward and the backward over rows), keys per
  program and query rows per step of the backward over keys, features per chunk of a product,
  and warps per program on a GPU."""
  rows: int
  keys: int
  key_step_rows: int
  features: int
  num_warps: int = 4


def blocks_for(platform: str, itemsize: int, q_padded: int, k_padded: int, d_padded: int,
               e_padded: int) -> Blocks:
  """The block sizes on ``platform`` (a CPU interprets the GPU's). On a TPU the head's keys and
  features stay whole (a core's VMEM holds them; Mosaic's blocks end in whole tiles); on a GPU
  each kind of block is kept to its budget of elements (``ROW_ELEMENTS``...), none below 16
  (Triton's dots) and no chunk of features below 32 (ptxas spilled a 512-key row block's
  products in chunks of 16: ``benchmarks/triton_resources.py``), with 8 warps where a
  program's blocks outgrow 4 warps' registers or the inputs are float32 (whose dots take twice
  a bf16 dot's registers)."""
  rows = min(32, q_padded)
  if platform == "tpu":
    return Blocks(rows, k_padded, rows, max(d_padded, e_padded))
  fit = lambda budget, per, most: max(16, min(most, next_power_of_two(budget // per + 1) // 2))
  rows = fit(ROW_ELEMENTS, k_padded, rows)
  keys = fit(GRADIENT_ELEMENTS, d_padded + e_padded, min(64, k_padded))
  features = max(32, fit(CHUNK_ELEMENTS, k_padded, max(d_padded, e_padded)))
  large = rows * k_padded >= ROW_ELEMENTS or keys * (d_padded + e_padded) > GRADIENT_ELEMENTS
  return Blocks(rows, keys, min(32, q_padded), features, 8 if large or itemsize > 2 else 4)


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything static about one call."""
  kind: str
  eps: float
  causal: bool
  dense_mask: bool
  n_q: int
  n_k: int
  q_padded: int
  k_padded: int
  d_padded: int
  e_padded: int
  blocks: Blocks
  platform: str
  interpret: bool

  @property
  def heads_major(self) -> bool:
    """The kernels read ``[B, H, n, d]`` arrays (Mosaic's blocks end in whole tiles, so a head
    cannot be one row of the fused layout's ``[B, n, H, d]``, which Triton reads strided)."""
    return self.platform == "tpu"


def make_config(kind: str, eps: float, causal: bool, dense_mask: bool, n_q: int, n_k: int,
                d: int, e: int, dtype, target: Optional[platform_lib.Target] = None) -> Config:
  """The ``Config`` of a call with inputs of ``dtype`` on ``target`` (default: the traced
  program's)."""
  if kind not in KINDS:
    raise ValueError(f"kind={kind!r}: must be one of {KINDS}")
  if n_k > MAX_KEYS:
    raise ValueError(f"the NAP/NON kernel holds a row's logits against every key: at most "
                     f"{MAX_KEYS} keys, got {n_k}; use implementation='fast' (linear in the "
                     f"keys)")
  target = target or platform_lib.target()
  size = lambda n: next_power_of_two(max(n, 16))
  padded = size(n_q), size(n_k), size(d), size(e)
  blocks = blocks_for(target.platform, jnp.dtype(dtype).itemsize, *padded)
  return Config(kind, float(eps), bool(causal), bool(dense_mask), n_q, n_k, *padded, blocks,
                target.platform, target.interpret)


# ----- the arithmetic (float32) -----

def _exponent(magnitude: Array) -> Array:
  """``numerics.power_of_two_exponent`` of float32 magnitudes from their bits: the e with
  ``magnitude < 2**e`` (0 for 0), clipped to [-64, 126] (below 2**-64 every value clips)."""
  bits = jax.lax.bitcast_convert_type(magnitude, jnp.int32)
  e = ((bits >> 23) & 0xFF) - 126
  return jnp.where(magnitude > 0, jnp.clip(e, -64, 126), 0)


def _power_of_two(e: Array) -> Array:
  """``2**e`` in float32 for integers e in its normal range, written into the exponent bits."""
  return jax.lax.bitcast_convert_type((e + 127) << 23, jnp.float32)


def _dot(a: Array, b: Array, contract) -> Array:
  return jax.lax.dot_general(a, b, (contract, ((), ())), preferred_element_type=jnp.float32)


def _chunks(cfg: Config, width: int) -> list:
  """The static column slices of a ``width``-wide block, a chunk of features each."""
  step = min(cfg.blocks.features, width)
  return [pl.ds(start, step) for start in range(0, width, step)]


def _scores(cfg: Config, a_ref, a_rows, b_ref, b_rows) -> Array:
  """``a @ b.T`` over the rows given of two refs, a chunk of features at a time."""
  return sum(_dot(a_ref[a_rows, c], b_ref[b_rows, c], ((1,), (1,)))
             for c in _chunks(cfg, a_ref.shape[-1]))


def _pick(block: Array, i: int) -> Array:
  """Column ``i`` of a ``[rows, n]`` block as ``[rows, 1]`` (a masked sum: Triton lowers no
  slice of a value)."""
  column = jax.lax.broadcasted_iota(jnp.int32, block.shape, 1)
  return jnp.sum(jnp.where(column == i, block, 0.0), axis=1, keepdims=True)


def _columns(values, width: int) -> Array:
  """``[rows, 1]`` columns side by side as ``[rows, width]`` (zeros after the last)."""
  shape = (values[0].shape[0], width)
  column = jax.lax.broadcasted_iota(jnp.int32, shape, 1)
  return sum(jnp.where(column == i, value, 0.0) for i, value in enumerate(values))


def _valid(cfg: Config, key_valid: Array, query_valid: Array, mask: Optional[Array],
           row0, column0) -> Array:
  """A block's validity: key and query masks, causal (its first row and column given), and
  the dense mask's block where there is one."""
  valid = (key_valid > 0) & (query_valid > 0)
  if cfg.causal:
    shape = valid.shape
    row = jax.lax.broadcasted_iota(jnp.int32, shape, 0) + row0
    column = jax.lax.broadcasted_iota(jnp.int32, shape, 1) + column0
    valid = valid & (column <= row + (cfg.n_k - cfg.n_q))
  if mask is not None:
    valid = valid & (mask > 0)
  return valid


class _Rows:
  """A block of query rows against every key: their statistics and weights."""

  def __init__(self, cfg: Config, logits: Array, valid: Array, gain, bias):
    self.cfg, self.valid = cfg, valid
    logits = jnp.where(valid, logits, 0.0)
    valid_keys = jnp.sum(valid.astype(jnp.float32), axis=-1, keepdims=True)
    self.count = jnp.maximum(valid_keys, 1.0)
    if cfg.kind == "non":
      self.alpha = 1.0 / jnp.sqrt(self.count)
      self.centred = logits
      self.weights = jnp.where(valid, logits * self.alpha, 0.0)
      return
    self.scale = _power_of_two(-_exponent(jnp.max(jnp.abs(logits), axis=-1, keepdims=True)))
    x = logits * self.scale
    top = jnp.max(jnp.where(valid, x, -jnp.inf), axis=-1, keepdims=True)
    self.top = jnp.where(valid_keys > 0, top, 0.0)
    x = jnp.where(valid, x - self.top, 0.0)
    self.mean = jnp.sum(x, axis=-1, keepdims=True) / self.count
    self.centred = jnp.where(valid, x - self.mean, 0.0)
    var = jnp.sum(self.centred * self.centred, axis=-1, keepdims=True) / self.count
    self.positive = var > 0
    self.std = jnp.where(self.positive, jnp.sqrt(jnp.where(self.positive, var, 1.0)), 0.0)
    den = self.std + cfg.eps * self.scale
    self.safe = den > 0
    self.den = jnp.where(self.safe, den, 1.0)
    self.alpha = jnp.where(self.safe, gain / self.den, 0.0)
    self.weights = jnp.where(valid, self.alpha * self.centred + bias, 0.0)

  def coefficients(self, dw: Array):
    """``(d logits, COEFFICIENTS as [rows, 8])`` from the weights' gradient ``dw``: a valid
    logit's gradient is ``scale * (alpha * dw + beta * centred - gamma)``."""
    dw = jnp.where(self.valid, dw, 0.0)
    if self.cfg.kind == "non":
      ones, zeros = jnp.ones_like(self.alpha), jnp.zeros_like(self.alpha)
      return dw * self.alpha, _columns((ones, zeros, zeros, self.alpha), len(COEFFICIENTS))
    d_centred = self.alpha * dw
    d_std = -jnp.sum(d_centred * self.centred, axis=-1, keepdims=True) / self.den
    d_var = jnp.where(self.positive, d_std / (2.0 * jnp.where(self.positive, self.std, 1.0)), 0.0)
    beta = 2.0 * d_var / self.count
    d_centred = jnp.where(self.valid, d_centred + beta * self.centred, 0.0)
    gamma = jnp.sum(d_centred, axis=-1, keepdims=True) / self.count
    d_logits = jnp.where(self.valid, d_centred - gamma, 0.0) * self.scale
    normalised = jnp.where(self.safe, self.centred / self.den, 0.0)
    d_gain = jnp.sum(dw * normalised, axis=-1, keepdims=True)
    d_bias = jnp.sum(dw, axis=-1, keepdims=True)
    return d_logits, _columns((self.scale, self.top, self.mean, self.alpha, beta, gamma,
                               d_gain, d_bias), len(COEFFICIENTS))


def _head_params(params_ref):
  """The head's ``(gain, bias)``, ``[1, 1]`` each, from its ``[1, 2]`` block."""
  params = params_ref[...].astype(jnp.float32)
  return _pick(params, 0), _pick(params, 1)


# ----- the kernels -----

def _row_block(cfg: Config, q_ref, k_ref, key_valid_ref, query_valid_ref, params_ref,
               mask_ref) -> _Rows:
  """This program's block of query rows against every key."""
  rows = cfg.blocks.rows
  row0 = pl.program_id(2) * rows
  valid = _valid(cfg, key_valid_ref[...], query_valid_ref[...],
                 None if mask_ref is None else mask_ref[...], row0, 0)
  everything = slice(None)
  return _Rows(cfg, _scores(cfg, q_ref, everything, k_ref, everything), valid,
               *_head_params(params_ref))


def _forward_kernel(q_ref, k_ref, v_ref, key_valid_ref, query_valid_ref, params_ref, *refs,
                    cfg: Config):
  mask_ref = refs[0] if cfg.dense_mask else None
  o_ref = refs[-1]
  block = _row_block(cfg, q_ref, k_ref, key_valid_ref, query_valid_ref, params_ref, mask_ref)
  weights = block.weights.astype(v_ref.dtype)
  for c in _chunks(cfg, cfg.e_padded):
    o_ref[:, c] = _dot(weights, v_ref[:, c], ((1,), (0,))).astype(o_ref.dtype)


def _rows_backward_kernel(q_ref, k_ref, v_ref, key_valid_ref, query_valid_ref, params_ref,
                          *refs, cfg: Config):
  mask_ref = refs[0] if cfg.dense_mask else None
  dout_ref, dq_ref, coefficients_ref = refs[-3:]
  block = _row_block(cfg, q_ref, k_ref, key_valid_ref, query_valid_ref, params_ref, mask_ref)
  everything = slice(None)
  d_weights = sum(_dot(dout_ref[:, c].astype(v_ref.dtype), v_ref[:, c], ((1,), (1,)))
                  for c in _chunks(cfg, cfg.e_padded))
  d_logits, coefficients = block.coefficients(d_weights)
  d_logits = d_logits.astype(k_ref.dtype)
  for c in _chunks(cfg, cfg.d_padded):
    dq_ref[:, c] = _dot(d_logits, k_ref[everything, c], ((1,), (0,))).astype(dq_ref.dtype)
  coefficients_ref[...] = coefficients


def _keys_backward_kernel(q_ref, k_ref, v_ref, key_valid_ref, query_valid_ref, params_ref,
                          *refs, cfg: Config):
  mask_ref = refs[0] if cfg.dense_mask else None
  dout_ref, coefficients_ref, dk_ref, dv_ref = refs[-4:]
  _, bias = _head_params(params_ref)
  step, keys = cfg.blocks.key_step_rows, cfg.blocks.keys
  key_valid, column0 = key_valid_ref[...], pl.program_id(2) * keys
  d_chunks, e_chunks = _chunks(cfg, cfg.d_padded), _chunks(cfg, cfg.e_padded)
  everything = slice(None)

  def body(t, carry):
    dk, dv = carry
    rows = pl.ds(pl.multiple_of(t * step, step), step)
    valid = _valid(cfg, key_valid, query_valid_ref[rows, :],
                   None if mask_ref is None else mask_ref[rows, :], t * step, column0)
    coefficients = coefficients_ref[rows, :]
    scale, top, mean, alpha, beta, gamma = (_pick(coefficients, i) for i in range(6))
    logits = _scores(cfg, q_ref, rows, k_ref, everything)
    centred = jnp.where(valid, logits * scale - top - mean, 0.0)
    weights = jnp.where(valid, alpha * centred + (bias if cfg.kind == "nap" else 0.0), 0.0)
    weights = weights.astype(v_ref.dtype)
    dv = [a + _dot(weights, dout_ref[rows, c].astype(v_ref.dtype), ((0,), (0,)))
          for a, c in zip(dv, e_chunks)]
    d_weights = sum(_dot(dout_ref[rows, c].astype(v_ref.dtype), v_ref[everything, c],
                         ((1,), (1,))) for c in e_chunks)
    d_logits = jnp.where(valid, (alpha * d_weights + beta * centred - gamma) * scale, 0.0)
    d_logits = d_logits.astype(q_ref.dtype)
    dk = [a + _dot(d_logits, q_ref[rows, c], ((0,), (0,))) for a, c in zip(dk, d_chunks)]
    return dk, dv

  zeros = lambda chunks: [jnp.zeros((keys, c.size), jnp.float32) for c in chunks]
  dk, dv = jax.lax.fori_loop(0, cfg.q_padded // step, body, (zeros(d_chunks), zeros(e_chunks)))
  for a, c in zip(dk, d_chunks):
    dk_ref[:, c] = a.astype(dk_ref.dtype)
  for a, c in zip(dv, e_chunks):
    dv_ref[:, c] = a.astype(dv_ref.dtype)


# ----- the calls (arrays in the fused layout [B, n, H, d], or [B, H, n, d]: heads_major) -----

def _head(cfg: Config, block: int, width: int, blocked: bool) -> pl.BlockSpec:
  """``[block, width]`` of one head: the grid's third index picks the block (``blocked``), or
  there is one."""
  at = (lambda i: i) if blocked else (lambda i: 0)
  if cfg.heads_major:
    return pl.BlockSpec((None, None, block, width), lambda b, h, i: (b, h, at(i), 0))
  return pl.BlockSpec((None, block, None, width), lambda b, h, i: (b, at(i), h, 0))


def _per_head(block: tuple, blocked: bool) -> pl.BlockSpec:
  """A ``[B, H, ...]`` array of the kernels' own (dense mask, coefficients): ``block`` of its
  last two axes, the grid's third index picking along the first (``blocked``: 0) or second
  (1) of them."""
  def index(b, h, i):
    at = [0, 0]
    if blocked is not None:
      at[blocked] = i
    return (b, h, *at)
  return pl.BlockSpec((None, None) + block, index)


def _shape(cfg: Config, batch: int, n: int, heads: int, width: int) -> tuple:
  return (batch, heads, n, width) if cfg.heads_major else (batch, n, heads, width)


def _row_specs(cfg: Config) -> list:
  """The inputs' blocks for the kernels over query rows."""
  rows = cfg.blocks.rows
  specs = [_head(cfg, rows, cfg.d_padded, True), _head(cfg, cfg.k_padded, cfg.d_padded, False),
           _head(cfg, cfg.k_padded, cfg.e_padded, False),
           pl.BlockSpec((None, 1, cfg.k_padded), lambda b, h, i: (b, 0, 0)),
           pl.BlockSpec((None, rows, 1), lambda b, h, i: (b, i, 0)),
           pl.BlockSpec((None, 1, 2), lambda b, h, i: (h, 0, 0))]
  if cfg.dense_mask:
    specs.append(_per_head((rows, cfg.k_padded), 0))
  return specs


def _key_specs(cfg: Config) -> list:
  """The inputs' blocks for the kernel over key blocks."""
  keys = cfg.blocks.keys
  specs = [_head(cfg, cfg.q_padded, cfg.d_padded, False), _head(cfg, keys, cfg.d_padded, True),
           _head(cfg, keys, cfg.e_padded, True),
           pl.BlockSpec((None, 1, keys), lambda b, h, i: (b, 0, i)),
           pl.BlockSpec((None, cfg.q_padded, 1), lambda b, h, i: (b, 0, 0)),
           pl.BlockSpec((None, 1, 2), lambda b, h, i: (h, 0, 0))]
  if cfg.dense_mask:
    specs.append(_per_head((cfg.q_padded, keys), 1))
  return specs


def _inputs(cfg: Config, q, k, v, key_valid, query_valid, params, mask) -> tuple:
  """The kernels' inputs in the specs' order (the dense mask only where the call has one)."""
  return (q, k, v, key_valid, query_valid, params) + ((mask,) if cfg.dense_mask else ())


def _call(kernel, cfg: Config, blocks: int, in_specs, out_specs, out_shapes, args, heads: int):
  grid = (args[0].shape[0], heads, blocks)
  return pallas(functools.partial(kernel, cfg=cfg), grid, in_specs, out_specs, out_shapes,
                platform=cfg.platform, interpret=cfg.interpret,
                num_warps=cfg.blocks.num_warps)(*args)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attend(cfg: Config, q, k, v, key_valid, query_valid, params, mask):
  batch, heads = q.shape[0], params.shape[0]
  return _call(_forward_kernel, cfg, cfg.q_padded // cfg.blocks.rows, _row_specs(cfg),
               [_head(cfg, cfg.blocks.rows, cfg.e_padded, True)],
               [(_shape(cfg, batch, cfg.q_padded, heads, cfg.e_padded), v.dtype)],
               _inputs(cfg, q, k, v, key_valid, query_valid, params, mask), heads)


def _attend_forward(cfg, q, k, v, key_valid, query_valid, params, mask):
  return (_attend(cfg, q, k, v, key_valid, query_valid, params, mask),
          (q, k, v, key_valid, query_valid, params, mask))


def _attend_backward(cfg, residuals, dout):
  q, k, v, key_valid, query_valid, params, mask = residuals
  batch, heads, rows = q.shape[0], params.shape[0], cfg.blocks.rows
  inputs = _inputs(cfg, q, k, v, key_valid, query_valid, params, mask)
  width = len(COEFFICIENTS)
  dq, coefficients = _call(
      _rows_backward_kernel, cfg, cfg.q_padded // rows,
      _row_specs(cfg) + [_head(cfg, rows, cfg.e_padded, True)],
      [_head(cfg, rows, cfg.d_padded, True), _per_head((rows, width), 0)],
      [(q.shape, q.dtype), ((batch, heads, cfg.q_padded, width), jnp.float32)],
      inputs + (dout,), heads)
  keys = cfg.blocks.keys
  dk, dv = _call(
      _keys_backward_kernel, cfg, cfg.k_padded // keys,
      _key_specs(cfg) + [_head(cfg, cfg.q_padded, cfg.e_padded, False),
                         _per_head((cfg.q_padded, width), None)],
      [_head(cfg, keys, cfg.d_padded, True), _head(cfg, keys, cfg.e_padded, True)],
      [(k.shape, k.dtype), (v.shape, v.dtype)], inputs + (dout, coefficients), heads)
  d_params = jnp.sum(coefficients[..., -2:], axis=(0, 2))[:, None, :]
  return (dq, dk, dv, jnp.zeros_like(key_valid), jnp.zeros_like(query_valid),
          d_params.astype(params.dtype), None if mask is None else jnp.zeros_like(mask))


_attend.defvjp(_attend_forward, _attend_backward)


def _validity(mask: Optional[Array], lead: tuple, length: int, padded: int) -> Array:
  """A structured mask ``[..., length]`` (None: all valid) as float32 ``[B, padded]``, 0 on the
  padding."""
  valid = (jnp.ones(lead + (length,), jnp.float32) if mask is None
           else jnp.broadcast_to(mask, lead + (length,)).astype(jnp.float32))
  return pad_to(valid.reshape(-1, length), (-1, padded))


def attention(q: Array, k: Array, v: Array, gain=1.0, bias=0.0, *, kind: str = "nap",
              mask: Optional[Array] = None, query_mask: Optional[Array] = None,
              key_mask: Optional[Array] = None, causal: bool = False,
              eps: float) -> Array:
  """NAP's (``kind`` "nap") or NON's ("non") attention by the kernels, in the fused layout.

  Args:
    q: floating-point queries, shape ``[..., n_q, h, d]`` (already scaled).
    k: keys, shape ``[..., n_k, h, d]``.
    v: values, shape ``[..., n_k, h, e]``.
    gain: NAP's scale, a number or one per head ``[h]`` (unused by NON).
    bias: NAP's shift, a number or one per head ``[h]`` (unused by NON).
    kind: one of ``KINDS``.
    mask: dense boolean mask broadcastable to ``[..., h, n_q, n_k]``, True = attend; or None.
    query_mask: boolean ``[..., n_q]``, True = valid query; or None.
    key_mask: boolean ``[..., n_k]``, True = valid key; or None.
    causal: query i sees only the keys j <= i + n_k - n_q.
    eps: NAP's constant added to the standard deviation (in logit units), > 0
      (``attention.numerics.NAP_EPSILON`` is NAP's).

  Returns:
    The outputs, shape ``[..., n_q, h, e]`` in ``v``'s dtype; 0 for rows without a valid key;
    differentiable in q, k, v, gain and bias (exact gradients, the logits recomputed).

  Raises:
    ValueError: for an unknown kind, a non-positive eps, more than ``MAX_KEYS`` keys, or shapes
      that do not fit.
  """
  if not eps > 0:
    raise ValueError(f"eps must be > 0 (a constant row would be divided by 0), got {eps!r}")
  lead, (n_q, heads, d), (n_k, e) = q.shape[:-3], q.shape[-3:], v.shape[-3::2]
  if k.shape != lead + (n_k, heads, d) or v.shape != lead + (n_k, heads, e):
    raise ValueError(f"incompatible shapes q {q.shape}, k {k.shape}, v {v.shape} (expected "
                     f"[..., n_q, h, d], [..., n_k, h, d], [..., n_k, h, e])")
  cfg = make_config(kind, eps, causal, mask is not None, n_q, n_k, d, e, q.dtype)
  to_kernel = lambda x: jnp.swapaxes(x, 1, 2) if cfg.heads_major else x

  def flat(x, n, width, padded_n, padded_w):
    return pad_to(to_kernel(x.reshape((-1, n, heads, width))),
                  _shape(cfg, -1, padded_n, -1, padded_w))
  params = jnp.stack([jnp.broadcast_to(jnp.asarray(gain, jnp.float32), (heads,)),
                      jnp.broadcast_to(jnp.asarray(bias, jnp.float32), (heads,))],
                     axis=-1)[:, None, :]
  dense = None
  if mask is not None:
    dense = pad_to(jnp.broadcast_to(mask, lead + (heads, n_q, n_k)).astype(jnp.float32)
                   .reshape((-1, heads, n_q, n_k)), (-1, heads, cfg.q_padded, cfg.k_padded))
  out = _attend(cfg, flat(q, n_q, d, cfg.q_padded, cfg.d_padded),
                flat(k, n_k, d, cfg.k_padded, cfg.d_padded),
                flat(v, n_k, e, cfg.k_padded, cfg.e_padded),
                _validity(key_mask, lead, n_k, cfg.k_padded)[:, None, :],
                _validity(query_mask, lead, n_q, cfg.q_padded)[:, :, None], params, dense)
  return to_kernel(out)[:, :n_q, :, :e].reshape(lead + (n_q, heads, e))
