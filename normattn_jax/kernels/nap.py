"""NAP's and NON's attention as Pallas kernels: the N x N logits and weights of a head live only
in the kernel, never in memory.

One program per (batch, head) takes the head's keys and values whole and its queries a block of
rows at a time: the logits of the block, their statistics over the valid keys of each row (NAP's
mean and standard deviation, NON's count), the weights and their sum over the values. The
gradient (``jax.custom_vjp``) is exact and recomputes the block's logits and statistics instead of
storing them; the keys' and values' gradients, and the per-head gain's and bias's, are summed
over the query blocks inside the program (no program adds to another's output, so nothing races
on a GPU).

The arithmetic is ``attention.weights.nap_weights``' (and ``non_weights``'), in float32: each row
scaled by a power of two above its largest ``|logit|`` (exact), its largest valid logit taken
off, then ``gain * (l - mean) / (std + eps) + bias`` over its valid keys; the weights rounded to
the values' dtype before their product with the values, as the quadratic path's weights are.
Masks are the structured ones (query and key masks, causal: query i sees the keys
j <= i + n_k - n_q) and, where given, a dense one. Lengths and widths are padded to powers of two
of at least 16 (Triton's blocks) with invalid keys and queries and zero features, which change no
real output or gradient.

A head's keys and values sit in the program whole, so a long sequence needs the memory of its
keys (``MAX_KEYS``); where the sequence is much longer than two head widths the linear-time
paths (``attention.fast``) form no N x N array either and take far fewer FLOPs.
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
MAX_KEYS = 2048   # a head's keys and values are read whole into one program
QUERY_BLOCK = 32  # query rows per step of a program


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
  block: int       # query rows per step
  platform: str
  interpret: bool

  @property
  def heads_major(self) -> bool:
    """The kernels read ``[B, H, n, d]`` arrays (Mosaic's blocks end in whole tiles, so a head
    cannot be one row of the fused layout's ``[B, n, H, d]``, which Triton reads strided)."""
    return self.platform == "tpu"


def make_config(kind: str, eps: float, causal: bool, dense_mask: bool, n_q: int, n_k: int,
                d: int, e: int, target: Optional[platform_lib.Target] = None) -> Config:
  """The ``Config`` of a call on ``target`` (default: the traced program's)."""
  if kind not in KINDS:
    raise ValueError(f"kind={kind!r}: must be one of {KINDS}")
  if n_k > MAX_KEYS:
    raise ValueError(f"the NAP/NON kernel reads a head's keys whole: at most {MAX_KEYS} keys, "
                     f"got {n_k}; use implementation='fast' (linear in the keys)")
  target = target or platform_lib.target()
  size = lambda n: next_power_of_two(max(n, 16))
  q_padded = size(n_q)
  return Config(kind, float(eps), bool(causal), bool(dense_mask), n_q, n_k, q_padded, size(n_k),
                size(d), size(e), min(QUERY_BLOCK, q_padded), target.platform, target.interpret)


# ----- the arithmetic of a block of query rows (float32) -----

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


class _Block:
  """One block of query rows: their valid keys, and NAP's or NON's statistics and weights."""

  def __init__(self, cfg: Config, q: Array, k: Array, valid: Array, gain, bias):
    self.cfg, self.valid = cfg, valid
    logits = jnp.where(valid, _dot(q, k, ((1,), (1,))), 0.0)
    valid_keys = jnp.sum(valid.astype(jnp.float32), axis=-1, keepdims=True)
    self.count = jnp.maximum(valid_keys, 1.0)
    if cfg.kind == "non":
      self.weights = jnp.where(valid, logits / jnp.sqrt(self.count), 0.0)
      return
    self.scale = _power_of_two(-_exponent(jnp.max(jnp.abs(logits), axis=-1, keepdims=True)))
    x = logits * self.scale
    top = jnp.max(jnp.where(valid, x, -jnp.inf), axis=-1, keepdims=True)
    x = jnp.where(valid, x - jnp.where(valid_keys > 0, top, 0.0), 0.0)
    mean = jnp.sum(x, axis=-1, keepdims=True) / self.count
    self.centred = jnp.where(valid, x - mean, 0.0)
    var = jnp.sum(self.centred * self.centred, axis=-1, keepdims=True) / self.count
    self.positive = var > 0
    self.std = jnp.where(self.positive, jnp.sqrt(jnp.where(self.positive, var, 1.0)), 0.0)
    den = self.std + cfg.eps * self.scale
    self.safe = den > 0
    self.den = jnp.where(self.safe, den, 1.0)
    self.gain = gain
    out = jnp.where(self.safe, gain * self.centred / self.den, 0.0) + bias
    self.weights = jnp.where(valid, out, 0.0)

  def logits_grad(self, dw: Array):
    """``(d logits, d gain, d bias)`` of the block from the weights' gradient ``dw``."""
    dw = jnp.where(self.valid, dw, 0.0)
    if self.cfg.kind == "non":
      return dw / jnp.sqrt(self.count), jnp.float32(0.0), jnp.float32(0.0)
    normalised = jnp.where(self.safe, self.centred / self.den, 0.0)
    d_gain, d_bias = jnp.sum(dw * normalised), jnp.sum(dw)
    d_centred = jnp.where(self.safe, self.gain * dw / self.den, 0.0)
    d_std = -jnp.sum(d_centred * self.centred, axis=-1, keepdims=True) / self.den
    d_var = jnp.where(self.positive, d_std / (2.0 * jnp.where(self.positive, self.std, 1.0)), 0.0)
    d_centred = d_centred + d_var * 2.0 * self.centred / self.count
    d_x = jnp.where(self.valid, d_centred - jnp.sum(d_centred, axis=-1, keepdims=True)
                    / self.count, 0.0)
    return d_x * self.scale, d_gain, d_bias


def _valid(cfg: Config, rows, key_valid_ref, query_valid_ref, mask_ref) -> Array:
  """The block's ``[block, k_padded]`` validity: key and query masks, causal, the dense mask."""
  valid = (key_valid_ref[...] > 0) & (query_valid_ref[rows, :] > 0)
  if cfg.causal:
    shape = (cfg.block, cfg.k_padded)
    row = jax.lax.broadcasted_iota(jnp.int32, shape, 0) + rows.start
    column = jax.lax.broadcasted_iota(jnp.int32, shape, 1)
    valid = valid & (column <= row + (cfg.n_k - cfg.n_q))
  if mask_ref is not None:
    valid = valid & (mask_ref[rows, :] > 0)
  return valid


def _head_params(params_ref):
  """The head's ``(gain, bias)``, ``[1, 1]`` each, from its ``[1, 2]`` block (a masked sum:
  Triton lowers no slice of a value)."""
  params = params_ref[...].astype(jnp.float32)
  column = jax.lax.broadcasted_iota(jnp.int32, params.shape, 1)
  pick = lambda i: jnp.sum(jnp.where(column == i, params, 0.0), axis=1, keepdims=True)
  return pick(0), pick(1)


def _rows(cfg: Config, t) -> pl.Slice:
  return pl.ds(pl.multiple_of(t * cfg.block, cfg.block), cfg.block)


# ----- the kernels -----

def _forward_kernel(q_ref, k_ref, v_ref, key_valid_ref, query_valid_ref, params_ref, *refs,
                    cfg: Config):
  mask_ref = refs[0] if cfg.dense_mask else None
  o_ref = refs[-1]
  k, v = k_ref[...], v_ref[...]
  gain, bias = _head_params(params_ref)

  def body(t, carry):
    rows = _rows(cfg, t)
    block = _Block(cfg, q_ref[rows, :], k,
                   _valid(cfg, rows, key_valid_ref, query_valid_ref, mask_ref), gain, bias)
    o_ref[rows, :] = _dot(block.weights.astype(v.dtype), v, ((1,), (0,))).astype(o_ref.dtype)
    return carry
  jax.lax.fori_loop(0, cfg.q_padded // cfg.block, body, 0)


def _backward_kernel(q_ref, k_ref, v_ref, key_valid_ref, query_valid_ref, params_ref, *refs,
                     cfg: Config):
  mask_ref = refs[0] if cfg.dense_mask else None
  dout_ref, dq_ref, dk_ref, dv_ref, dparams_ref = refs[-5:]
  k, v = k_ref[...], v_ref[...]
  gain, bias = _head_params(params_ref)

  def body(t, carry):
    dk, dv, d_gain, d_bias = carry
    rows = _rows(cfg, t)
    q, dout = q_ref[rows, :], dout_ref[rows, :]
    block = _Block(cfg, q, k, _valid(cfg, rows, key_valid_ref, query_valid_ref, mask_ref),
                   gain, bias)
    dv = dv + _dot(block.weights.astype(v.dtype), dout.astype(v.dtype), ((0,), (0,)))
    dl, dg, db = block.logits_grad(_dot(dout.astype(v.dtype), v, ((1,), (1,))))
    dq_ref[rows, :] = _dot(dl.astype(k.dtype), k, ((1,), (0,))).astype(dq_ref.dtype)
    dk = dk + _dot(dl.astype(q.dtype), q, ((0,), (0,)))
    return dk, dv, d_gain + dg, d_bias + db

  zeros = (jnp.zeros((cfg.k_padded, cfg.d_padded), jnp.float32),
           jnp.zeros((cfg.k_padded, cfg.e_padded), jnp.float32), jnp.float32(0.0),
           jnp.float32(0.0))
  dk, dv, d_gain, d_bias = jax.lax.fori_loop(0, cfg.q_padded // cfg.block, body, zeros)
  dk_ref[...] = dk.astype(dk_ref.dtype)
  dv_ref[...] = dv.astype(dv_ref.dtype)
  column = jax.lax.broadcasted_iota(jnp.int32, (1, 2), 1)
  dparams_ref[...] = jnp.where(column == 0, d_gain, d_bias)


# ----- the calls (arrays in the fused layout [B, n, H, d], or [B, H, n, d]: heads_major) -----

def _head(cfg: Config, n: int, width: int) -> pl.BlockSpec:
  """One head's ``[n, width]``."""
  if cfg.heads_major:
    return pl.BlockSpec((None, None, n, width), lambda b, h: (b, h, 0, 0))
  return pl.BlockSpec((None, n, None, width), lambda b, h: (b, 0, h, 0))


def _shape(cfg: Config, batch: int, n: int, heads: int, width: int) -> tuple:
  return (batch, heads, n, width) if cfg.heads_major else (batch, n, heads, width)


def _specs(cfg: Config) -> list:
  specs = [_head(cfg, cfg.q_padded, cfg.d_padded), _head(cfg, cfg.k_padded, cfg.d_padded),
           _head(cfg, cfg.k_padded, cfg.e_padded),
           pl.BlockSpec((None, 1, cfg.k_padded), lambda b, h: (b, 0, 0)),
           pl.BlockSpec((None, cfg.q_padded, 1), lambda b, h: (b, 0, 0)),
           pl.BlockSpec((None, 1, 2), lambda b, h: (h, 0, 0))]
  if cfg.dense_mask:
    specs.append(pl.BlockSpec((None, None, cfg.q_padded, cfg.k_padded),
                              lambda b, h: (b, h, 0, 0)))
  return specs


def _inputs(cfg: Config, q, k, v, key_valid, query_valid, params, mask) -> tuple:
  """The kernels' inputs in ``_specs``' order (the dense mask only where the call has one)."""
  return (q, k, v, key_valid, query_valid, params) + ((mask,) if cfg.dense_mask else ())


def _call(kernel, cfg: Config, grid, in_specs, out_specs, out_shapes, args):
  return pallas(functools.partial(kernel, cfg=cfg), grid, in_specs, out_specs, out_shapes,
                platform=cfg.platform, interpret=cfg.interpret)(*args)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attend(cfg: Config, q, k, v, key_valid, query_valid, params, mask):
  batch, heads = q.shape[0], params.shape[0]
  return _call(_forward_kernel, cfg, (batch, heads), _specs(cfg),
               [_head(cfg, cfg.q_padded, cfg.e_padded)],
               [(_shape(cfg, batch, cfg.q_padded, heads, cfg.e_padded), v.dtype)],
               _inputs(cfg, q, k, v, key_valid, query_valid, params, mask))


def _attend_forward(cfg, q, k, v, key_valid, query_valid, params, mask):
  return (_attend(cfg, q, k, v, key_valid, query_valid, params, mask),
          (q, k, v, key_valid, query_valid, params, mask))


def _attend_backward(cfg, residuals, dout):
  q, k, v, key_valid, query_valid, params, mask = residuals
  batch, heads = q.shape[0], params.shape[0]
  args = _inputs(cfg, q, k, v, key_valid, query_valid, params, mask) + (dout,)
  dq, dk, dv, dparams = _call(
      _backward_kernel, cfg, (batch, heads),
      _specs(cfg) + [_head(cfg, cfg.q_padded, cfg.e_padded)],
      [_head(cfg, cfg.q_padded, cfg.d_padded), _head(cfg, cfg.k_padded, cfg.d_padded),
       _head(cfg, cfg.k_padded, cfg.e_padded),
       pl.BlockSpec((None, None, 1, 2), lambda b, h: (b, h, 0, 0))],
      [(q.shape, q.dtype), (k.shape, k.dtype), (v.shape, v.dtype),
       ((batch, heads, 1, 2), jnp.float32)], args)
  return (dq, dk, dv, jnp.zeros_like(key_valid), jnp.zeros_like(query_valid),
          jnp.sum(dparams, axis=0).astype(params.dtype),
          None if mask is None else jnp.zeros_like(mask))


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
  cfg = make_config(kind, eps, causal, mask is not None, n_q, n_k, d, e)
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
