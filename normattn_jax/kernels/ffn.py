"""The feed-forward sub-block of the NAP paper's blocks as Pallas kernels: the hidden layer
(4d wide for attention archs) lives only in the kernel, never in memory.

The two layouts of ``normattn_jax.blocks`` over one token ``p`` (a row of d features):

  MTE:   out = p + LN_o(W2 GELU(LN_h(W1 p + b1)) + b2)
  BERT:  out = LN_o(p + W2 GELU(W1 p + b1) + b2)

Every row is independent, so the kernels tile the rows. The forward kernel computes the hidden
layer a chunk of ``Tiles.hidden`` features at a time (the MTE layout's hidden LayerNorm first
takes the row's statistics over the chunks, then normalises them chunk by chunk), accumulates
``W2 g`` and writes only the row's output. Its gradient (``jax.custom_vjp``) is exact and
recomputes the hidden layer instead of storing it: a kernel over the rows gives the inputs'
gradient, ``df`` (the gradient at ``W2 g + b2``, d wide), the hidden LayerNorm's per-row
statistics and the d-wide vectors' partial sums; a kernel over chunks of hidden features then
accumulates the weights' gradients over every row in one program per chunk (no program adds to
another's output, so nothing races on a GPU). Recomputing costs matmuls to save the bytes of
the hidden layer, which XLA writes and reads several times: forward and backward take 10 of
the hidden layer's d x F matmuls where it is one chunk (XLA: 6), up to 15 where it is several
(the MTE layout's hidden LayerNorm needs a pass over the chunks for its statistics before any
chunk can go on, and each pass recomputes its chunk).

The arithmetic follows the XLA path's roundings: matmuls take the compute dtype and accumulate
in float32, then round to it, biases and LayerNorm gains are added in it, LayerNorm statistics
are float32. Rows, features and hidden features are padded where a platform's blocks need it
(Triton: powers of two of at least 16) with zeros that change no real output or gradient.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from normattn_jax.kernels import platform as platform_lib
from normattn_jax.kernels.calls import next_power_of_two, pad_to, pallas, round_up

Array = jax.Array
LAYOUTS = ("mte", "bert")
GELU_C = math.sqrt(2.0 / math.pi)  # BERT's tanh approximation of GELU
GELU_A = 0.044715
VECTOR_ROWS = 8  # the rows of a block of per-feature partial sums (a TPU tile's sublanes)


class Params(NamedTuple):
  """The sub-block's parameters, each in the compute dtype; vectors as ``[1, n]`` rows.

  ``hidden_scale`` and ``hidden_bias`` are the MTE layout's hidden LayerNorm (ones and zeros,
  unused, for BERT)."""
  w1: Array            # [d, F]
  b1: Array            # [1, F]
  hidden_scale: Array  # [1, F]
  hidden_bias: Array   # [1, F]
  w2: Array            # [F, d]
  b2: Array            # [1, d]
  out_scale: Array     # [1, d]
  out_bias: Array      # [1, d]


@dataclasses.dataclass(frozen=True)
class Tiles:
  """Block sizes: rows per program, hidden features per chunk, and whether blocks must be
  powers of two (Triton's)."""
  rows: int
  hidden: int
  powers_of_two: bool
  num_warps: int = 4


def tiles_for(platform: str, d: int) -> Tiles:
  """The block sizes on ``platform`` for rows of ``d`` features (a CPU interprets the GPU's):
  on a GPU, d <= 64 with its 4d hidden features in one chunk, and blocks of rows as large as
  ptxas keeps mostly in registers (``benchmarks/triton_resources.py``, sm_90, bf16: at d = 32
  a block of 64 rows spilled 1,040 and 2,032 bytes per thread in the MTE layout's backward
  kernels, 32 rows 1,008 and 320; at d = 128, 32 rows spilled 1,160 bytes in its backward over
  rows, 16 rows 392)."""
  if platform == "tpu":
    return Tiles(rows=128, hidden=128, powers_of_two=False)
  wide = d > 64
  return Tiles(rows=16 if wide else 32, hidden=64 if wide else 128, powers_of_two=True,
               num_warps=8 if wide else 4)


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything static about one call: layout, epsilon, real and padded sizes, blocks."""
  layout: str
  epsilon: float
  d: int
  ffn: int
  d_padded: int
  ffn_padded: int
  rows: int        # rows per program
  hidden: int      # hidden features per chunk
  platform: str
  interpret: bool
  num_warps: int

  @property
  def chunks(self) -> int:
    """The chunks of hidden features each pass goes through."""
    return self.ffn_padded // self.hidden


def make_config(layout: str, epsilon: float, num_rows: int, d: int, ffn: int,
                target: Optional[platform_lib.Target] = None) -> Config:
  """The ``Config`` of a call on ``target`` (default: the traced program's)."""
  if layout not in LAYOUTS:
    raise ValueError(f"layout={layout!r}: must be one of {LAYOUTS}")
  target = target or platform_lib.target()
  tiles = tiles_for(target.platform, d)
  if tiles.powers_of_two:
    d_padded = next_power_of_two(max(d, 16))
    hidden = min(tiles.hidden, next_power_of_two(max(ffn, 16)))
    rows = min(tiles.rows, next_power_of_two(max(num_rows, 16)))
  else:
    d_padded = d
    hidden = ffn if ffn <= tiles.hidden else tiles.hidden
    rows = min(tiles.rows, round_up(num_rows, 8))
  return Config(layout, float(epsilon), d, ffn, d_padded, round_up(ffn, hidden), rows, hidden,
                target.platform, target.interpret, tiles.num_warps)


# ----- the arithmetic of a block of rows (float32 arrays, rounded where the XLA path rounds) -----

def _gelu(a: Array) -> Array:
  return 0.5 * a * (1.0 + jnp.tanh(GELU_C * (a + GELU_A * a * a * a)))


def _gelu_grad(a: Array) -> Array:
  t = jnp.tanh(GELU_C * (a + GELU_A * a * a * a))
  return 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_A * a * a)


def _dot(a: Array, b: Array, dtype, contract=((1,), (0,))) -> Array:
  """``a @ b`` (other contractions by ``contract``) with operands in ``dtype``, float32 out."""
  return jax.lax.dot_general(a.astype(dtype), b.astype(dtype), (contract, ((), ())),
                             preferred_element_type=jnp.float32)


def _columns(width: int, real: int) -> Optional[Array]:
  """True on the real columns of a ``[1, width]`` row (None: all are real)."""
  if real >= width:
    return None
  return jax.lax.broadcasted_iota(jnp.int32, (1, width), 1) < real


def _layer_norm(v: Array, real: int, epsilon: float):
  """``(normalised v, 1/std)`` over the ``real`` first columns of ``v`` (float32; the padded
  columns normalise to 0)."""
  valid = _columns(v.shape[-1], real)
  masked = v if valid is None else jnp.where(valid, v, 0.0)
  mean = jnp.sum(masked, axis=-1, keepdims=True) / real
  centred = v - mean
  if valid is not None:
    centred = jnp.where(valid, centred, 0.0)
  inv = jax.lax.rsqrt(jnp.sum(centred * centred, axis=-1, keepdims=True) / real + epsilon)
  return centred * inv, inv


def _layer_norm_grad(dn: Array, n: Array, inv: Array, real: int) -> Array:
  """The input's gradient of a LayerNorm from its normalised output's, ``dn``."""
  mean_dn = jnp.sum(dn, axis=-1, keepdims=True) / real
  mean_dn_n = jnp.sum(dn * n, axis=-1, keepdims=True) / real
  out = inv * (dn - mean_dn - n * mean_dn_n)
  valid = _columns(dn.shape[-1], real)
  return out if valid is None else jnp.where(valid, out, 0.0)


class _Rows:
  """The arithmetic of one block of rows, reading the parameters from their refs chunk by
  chunk (``dtype`` the compute dtype)."""

  def __init__(self, cfg: Config, refs: Params, dtype):
    self.cfg, self.refs, self.dtype = cfg, refs, dtype
    self._kept = {}

  def keep(self, key: tuple, make):
    """``make()``, computed once per kernel where the hidden layer is one chunk, every pass over
    the chunks reusing it; with several chunks each pass recomputes its own, so that one chunk
    at a time is live."""
    if self.cfg.chunks > 1:
      return make()
    if key not in self._kept:
      self._kept[key] = make()
    return self._kept[key]

  def round(self, v: Array) -> Array:
    return v.astype(self.dtype).astype(jnp.float32)

  def chunk(self, ref, j: int, rows: bool = False) -> Array:
    """Chunk ``j`` of a parameter along its hidden axis (the columns; ``rows`` for W2)."""
    part = pl.ds(j * self.cfg.hidden, self.cfg.hidden)
    return ref[part, :] if rows else ref[:, part]

  def vector(self, ref, j: Optional[int] = None) -> Array:
    return (ref[...] if j is None else self.chunk(ref, j)).astype(jnp.float32)

  def hidden_in(self, x: Array, j: int) -> Array:
    """``W1 x + b1`` of chunk ``j``, as the XLA path rounds it."""
    def make():
      h = self.round(_dot(x, self.chunk(self.refs.w1, j), self.dtype))
      return self.round(h + self.vector(self.refs.b1, j))
    return self.keep(("hidden", j, id(x)), make)

  def real_hidden(self, j: int) -> int:
    return min(self.cfg.hidden, self.cfg.ffn - j * self.cfg.hidden)

  def hidden_statistics(self, x: Array):
    """The MTE hidden LayerNorm's mean and 1/std per row, ``[rows, 1]`` each, over the chunks
    (Chan's pairwise combination of each chunk's mean and squared deviations)."""
    mean = m2 = None
    count = 0
    for j in range(self.cfg.chunks):
      h, real = self.hidden_in(x, j), self.real_hidden(j)
      valid = _columns(self.cfg.hidden, real)
      chunk_mean = jnp.sum(h if valid is None else jnp.where(valid, h, 0.0), -1,
                           keepdims=True) / real
      dev = h - chunk_mean
      if valid is not None:
        dev = jnp.where(valid, dev, 0.0)
      chunk_m2 = jnp.sum(dev * dev, -1, keepdims=True)
      if mean is None:
        mean, m2, count = chunk_mean, chunk_m2, real
        continue
      total = count + real
      delta = chunk_mean - mean
      mean = mean + delta * (real / total)
      m2 = m2 + chunk_m2 + delta * delta * (count * real / total)
      count = total
    return mean, jax.lax.rsqrt(m2 / self.cfg.ffn + self.cfg.epsilon)

  def activation(self, x: Array, j: int, stats):
    """``(pre-activation a, normalised hidden n or None)`` of chunk ``j``: a = LN_h(W1 x + b1)
    for MTE, W1 x + b1 for BERT."""
    h = self.hidden_in(x, j)
    if self.cfg.layout == "bert":
      return h, None
    mean, inv = stats
    n = (h - mean) * inv
    a = self.round(self.round(self.round(n) * self.vector(self.refs.hidden_scale, j))
                   + self.vector(self.refs.hidden_bias, j))
    return a, n

  def ffn_out(self, x: Array, stats) -> Array:
    """``W2 GELU(...) + b2`` of the rows, float32 ``[rows, d_padded]`` (rounded)."""
    f = None
    for j in range(self.cfg.chunks):
      a, _ = self.activation(x, j, stats)
      part = _dot(self.round(_gelu(a)), self.chunk(self.refs.w2, j, rows=True), self.dtype)
      f = part if f is None else f + part
    return self.round(self.round(f) + self.vector(self.refs.b2))

  def out_norm(self, v: Array):
    """``(LN_o(v) rounded, normalised v, 1/std)``."""
    n, inv = _layer_norm(v, self.cfg.d, self.cfg.epsilon)
    y = self.round(self.round(self.round(n) * self.vector(self.refs.out_scale))
                   + self.vector(self.refs.out_bias))
    return y, n, inv

  def forward(self, x: Array) -> Array:
    """The sub-block's output of the rows (float32, rounded)."""
    stats = self.hidden_statistics(x) if self.cfg.layout == "mte" else None
    f = self.ffn_out(x, stats)
    xf = x.astype(jnp.float32)
    if self.cfg.layout == "mte":
      return self.round(xf + self.out_norm(f)[0])
    return self.out_norm(self.round(xf + f))[0]

  def hidden_grad(self, x: Array, j: int, stats, df: Array, sums=None):
    """Chunk ``j``'s ``(dh, da, n, g)``: the gradients at ``W1 x + b1`` and at the
    pre-activation, the normalised hidden (MTE) and ``GELU(a)``; for MTE, ``sums`` (the hidden
    LayerNorm's mean of dn and of dn * n per row) is needed for dh (None gives dh None)."""
    a, n = self.activation(x, j, stats)
    dg = self.keep(("dg", j, id(df)), lambda: _dot(
        df, self.chunk(self.refs.w2, j, rows=True), self.dtype, ((1,), (1,))))
    da = dg * _gelu_grad(a)
    g = self.round(_gelu(a))
    if self.cfg.layout == "bert":
      return da, da, None, g
    if sums is None:
      return None, da, n, g
    dn = da * self.vector(self.refs.hidden_scale, j)
    _, inv = stats
    mean_dn, mean_dn_n = sums
    dh = inv * (dn - mean_dn - n * mean_dn_n)
    valid = _columns(self.cfg.hidden, self.real_hidden(j))
    return (dh if valid is None else jnp.where(valid, dh, 0.0)), da, n, g


# ----- the kernels -----

def _forward_kernel(x_ref, *refs, cfg: Config):
  *params, o_ref = refs
  rows = _Rows(cfg, Params(*params), x_ref.dtype)
  o_ref[...] = rows.forward(x_ref[...]).astype(o_ref.dtype)


def _stack_rows(vectors, width: int) -> Array:
  """``[VECTOR_ROWS, width]`` with the ``[1, width]`` vectors in its first rows, 0 below."""
  row = jax.lax.broadcasted_iota(jnp.int32, (VECTOR_ROWS, width), 0)
  out = jnp.zeros((VECTOR_ROWS, width), jnp.float32)
  for i, v in enumerate(vectors):
    out = jnp.where(row == i, jnp.broadcast_to(v, (VECTOR_ROWS, width)), out)
  return out


def _rows_backward_kernel(x_ref, dout_ref, *refs, cfg: Config):
  """Per block of rows: the inputs' gradient, df, the hidden LayerNorm's statistics and sums
  (MTE), and the partial sums of the d-wide vectors' gradients (out scale, out bias, b2)."""
  *params, dx_ref, df_ref, stats_ref, vectors_ref = refs
  rows = _Rows(cfg, Params(*params), x_ref.dtype)
  x = x_ref[...]
  dout = dout_ref[...].astype(jnp.float32)
  stats = rows.hidden_statistics(x) if cfg.layout == "mte" else None
  f = rows.ffn_out(x, stats)
  scale = rows.vector(rows.refs.out_scale)
  if cfg.layout == "mte":
    _, n_out, inv_out = rows.out_norm(f)
    df = _layer_norm_grad(dout * scale, n_out, inv_out, cfg.d)
    dx = dout
  else:
    _, n_out, inv_out = rows.out_norm(rows.round(x.astype(jnp.float32) + f))
    df = _layer_norm_grad(dout * scale, n_out, inv_out, cfg.d)
    dx = df
  column_sum = lambda v: jnp.sum(v, axis=0, keepdims=True)
  vectors_ref[0] = _stack_rows([column_sum(dout * rows.round(n_out)), column_sum(dout),
                                column_sum(df)], cfg.d_padded)
  zero = jnp.zeros(dout.shape[:1] + (1,), jnp.float32)
  sums = None
  if cfg.layout == "mte":
    mean_dn = mean_dn_n = zero
    for j in range(cfg.chunks):
      _, da, n, _ = rows.hidden_grad(x, j, stats, df)
      dn = da * rows.vector(rows.refs.hidden_scale, j)
      mean_dn = mean_dn + jnp.sum(dn, -1, keepdims=True)
      mean_dn_n = mean_dn_n + jnp.sum(dn * n, -1, keepdims=True)
    sums = (mean_dn / cfg.ffn, mean_dn_n / cfg.ffn)
  for j in range(cfg.chunks):
    dh = rows.hidden_grad(x, j, stats, df, sums)[0]
    dx = dx + _dot(dh, rows.chunk(rows.refs.w1, j), rows.dtype, ((1,), (1,)))
  dx_ref[...] = dx.astype(dx_ref.dtype)
  df_ref[...] = df
  parts = (stats[0], stats[1], sums[0], sums[1]) if cfg.layout == "mte" else (zero,) * 4
  column = jax.lax.broadcasted_iota(jnp.int32, stats_ref.shape, 1)
  out = jnp.zeros(stats_ref.shape, jnp.float32)
  for i, part in enumerate(parts):
    out = jnp.where(column == i, part, out)
  stats_ref[...] = out


def _weights_backward_kernel(x_ref, df_ref, stats_ref, *refs, cfg: Config, chunk: Config):
  """Per chunk of hidden features (``chunk``: the call's config as one chunk, its parameters'
  blocks): W1's and W2's gradients and those of b1 and the hidden LayerNorm's scale and bias,
  summed over every block of rows in turn. Its padded hidden features (if any) give values
  that the caller drops."""
  *params, dw1_ref, dw2_ref, vectors_ref = refs
  rows = _Rows(chunk, Params(*params), x_ref.dtype)
  block, mte = cfg.rows, cfg.layout == "mte"
  column_sum = lambda v: jnp.sum(v, axis=0, keepdims=True)

  def body(t, acc):
    dw1, dw2, vectors = acc
    part = pl.ds(pl.multiple_of(t * block, block), block)
    x, df = x_ref[part, :], df_ref[part, :]
    column = lambda i: stats_ref[part, pl.ds(i, 1)]
    stats = (column(0), column(1)) if mte else None
    sums = (column(2), column(3)) if mte else None
    dh, da, n, g = rows.hidden_grad(x, 0, stats, df, sums)
    dw1 = dw1 + _dot(x, dh, rows.dtype, ((0,), (0,)))
    dw2 = dw2 + _dot(g, df, rows.dtype, ((0,), (0,)))
    hidden_norm = [column_sum(da * rows.round(n)), column_sum(da)] if mte else []
    vectors = vectors + _stack_rows([column_sum(dh)] + hidden_norm, chunk.hidden)
    return dw1, dw2, vectors

  zeros = (jnp.zeros(dw1_ref.shape, jnp.float32), jnp.zeros(dw2_ref.shape, jnp.float32),
           jnp.zeros(vectors_ref.shape, jnp.float32))
  dw1, dw2, vectors = jax.lax.fori_loop(0, x_ref.shape[0] // block, body, zeros)
  dw1_ref[...] = dw1
  dw2_ref[...] = dw2
  vectors_ref[...] = vectors


# ----- the calls -----

def _call(kernel, cfg: Config, grid: int, in_specs, out_specs, out_shapes):
  """``pallas_call`` of ``kernel`` over ``grid`` programs (``calls.pallas``)."""
  return pallas(kernel, (grid,), in_specs, out_specs, out_shapes, platform=cfg.platform,
                interpret=cfg.interpret, num_warps=cfg.num_warps)


def _full(shape) -> pl.BlockSpec:
  return pl.BlockSpec(shape, lambda i: (0,) * len(shape))


def _row_block(cfg: Config, width: int) -> pl.BlockSpec:
  return pl.BlockSpec((cfg.rows, width), lambda i: (i, 0))


def _param_specs(cfg: Config) -> list:
  d, f = cfg.d_padded, cfg.ffn_padded
  return [_full((d, f)), _full((1, f)), _full((1, f)), _full((1, f)), _full((f, d)),
          _full((1, d)), _full((1, d)), _full((1, d))]


def _forward(cfg: Config, x: Array, params: Params) -> Array:
  return _call(functools.partial(_forward_kernel, cfg=cfg), cfg, x.shape[0] // cfg.rows,
               [_row_block(cfg, cfg.d_padded)] + _param_specs(cfg),
               [_row_block(cfg, cfg.d_padded)], [(x.shape, x.dtype)])(x, *params)


def _backward(cfg: Config, x: Array, params: Params, dout: Array):
  num_rows, d = x.shape
  blocks = num_rows // cfg.rows
  dx, df, stats, vectors = _call(
      functools.partial(_rows_backward_kernel, cfg=cfg), cfg, blocks,
      [_row_block(cfg, d), _row_block(cfg, d)] + _param_specs(cfg),
      [_row_block(cfg, d), _row_block(cfg, d), _row_block(cfg, 4),
       pl.BlockSpec((1, VECTOR_ROWS, d), lambda i: (i, 0, 0))],
      [(x.shape, x.dtype), (x.shape, jnp.float32), ((num_rows, 4), jnp.float32),
       ((blocks, VECTOR_ROWS, d), jnp.float32)])(x, dout, *params)
  h = cfg.hidden
  chunk = dataclasses.replace(cfg, ffn=h, ffn_padded=h)
  column_block = lambda: pl.BlockSpec((1, h), lambda j: (0, j))
  dw1, dw2, hidden_vectors = _call(
      functools.partial(_weights_backward_kernel, cfg=cfg, chunk=chunk), cfg, cfg.chunks,
      [_full((num_rows, d)), _full((num_rows, d)), _full((num_rows, 4)),
       pl.BlockSpec((d, h), lambda j: (0, j)), column_block(), column_block(), column_block(),
       pl.BlockSpec((h, d), lambda j: (j, 0)), _full((1, d)), _full((1, d)), _full((1, d))],
      [pl.BlockSpec((d, h), lambda j: (0, j)), pl.BlockSpec((h, d), lambda j: (j, 0)),
       pl.BlockSpec((VECTOR_ROWS, h), lambda j: (0, j))],
      [((d, cfg.ffn_padded), jnp.float32), ((cfg.ffn_padded, d), jnp.float32),
       ((VECTOR_ROWS, cfg.ffn_padded), jnp.float32)])(x, df, stats, *params)
  out_vectors = jnp.sum(vectors, axis=0)
  row = lambda v, i: v[i:i + 1]
  grads = Params(dw1, row(hidden_vectors, 0), row(hidden_vectors, 1), row(hidden_vectors, 2),
                 dw2, row(out_vectors, 2), row(out_vectors, 0), row(out_vectors, 1))
  return dx, Params(*(g.astype(p.dtype) for g, p in zip(grads, params)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _sub_block(cfg: Config, x: Array, params: Params) -> Array:
  return _forward(cfg, x, params)


def _sub_block_forward(cfg: Config, x: Array, params: Params):
  return _forward(cfg, x, params), (x, params)


def _sub_block_backward(cfg: Config, residuals, dout: Array):
  x, params = residuals
  return _backward(cfg, x, params, dout)


_sub_block.defvjp(_sub_block_forward, _sub_block_backward)


def feed_forward(x: Array, params: Params, *, layout: str, epsilon: float) -> Array:
  """The feed-forward sub-block of ``layout`` over the rows of ``x [..., d]`` by the kernels.

  Args:
    x: the sub-block's input ``p``, in the compute dtype, shape ``[..., d]``.
    params: ``Params`` in the compute dtype (vectors ``[1, n]``; ``hidden_*`` unused by BERT).
    layout: "mte" or "bert" (``LAYOUTS``).
    epsilon: both LayerNorms' epsilon.

  Returns:
    The sub-block's output, of ``x``'s shape and dtype; differentiable (exact gradients, the
    hidden layer recomputed).

  Raises:
    ValueError: for an unknown layout or parameters whose shapes do not fit ``x``.
  """
  d, ffn = params.w1.shape
  expected = Params((d, ffn), (1, ffn), (1, ffn), (1, ffn), (ffn, d), (1, d), (1, d), (1, d))
  got = Params(*(tuple(p.shape) for p in params))
  if x.shape[-1] != d or got != expected:
    raise ValueError(f"feed_forward: x of shape {x.shape} and parameters of shapes "
                     f"{tuple(got)} do not fit (expected {tuple(expected)})")
  lead = x.shape[:-1]
  rows = x.reshape(-1, d)
  cfg = make_config(layout, epsilon, rows.shape[0], d, ffn)
  num_rows = round_up(rows.shape[0], cfg.rows)
  dp, fp = cfg.d_padded, cfg.ffn_padded
  padded = Params(*(pad_to(p, s) for p, s in zip(params, (
      (dp, fp), (1, fp), (1, fp), (1, fp), (fp, dp), (1, dp), (1, dp), (1, dp)))))
  out = _sub_block(cfg, pad_to(rows, (num_rows, dp)), padded)
  return out[:rows.shape[0], :d].reshape(lead + (d,))
