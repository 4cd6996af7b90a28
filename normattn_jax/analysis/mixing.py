"""Norm-based analysis of the whole attention block (Kobayashi et al., EMNLP 2021).

A post-LN attention block computes ``x~_i = LN(y_i)`` with ``y_i = x_i + ATTN(x_i, X)`` and::

    ATTN(x_i, X) = sum_j sum_h alpha^h_ij f^h(x_j) + b_O,   f^h(x) = (x W_V^h + b_V^h) W_O^h.

LN is distributed exactly over a sum: ``LN(y) = sum_k g_y(z_k) + beta`` for ``y = sum_k z_k``, with
``g_y(z) = c(z) / s(y) * gamma``, ``c`` the centring and ``s(y) = sqrt(var(y) + eps)`` of the real
LN input. So the output splits exactly into::

    mixing      sum_{j != i} g_y(sum_h alpha^h_ij f^h(x_j))      (context)
    preserving  g_y(sum_h alpha^h_ii f^h(x_i)) + g_y(x_i)         (the token itself, and RES)
    bias        g_y(b_O) + beta                                  (belongs to neither effect)

and the five methods of the paper give one mixing ratio per token::

    ATTN-W       head mean of sum_{j != i} alpha_ij / sum_j alpha_ij   (= 1 - mean alpha_ii)
    ATTN-N       |A_mix| / (|A_mix| + |A_self|),  A = sum_h alpha f^h without RES and LN
    ATTNRES-W    head mean of 0.5 sum_{j != i} alpha_ij / (0.5 sum_j alpha_ij + 0.5)  (half ATTN-W)
    ATTNRES-N    |A_mix| / (|A_mix| + |A_self + x_i|)
    ATTNRESLN-N  |mixing| / (|mixing| + |preserving|)

For weights that do not sum to one or may be negative (NAP, NON) the W methods use ``|alpha|``.

The instrument reads any flax model whose attention blocks are ``MultiHeadAttention`` followed by
a LayerNorm named ``attention_norm`` on ``x + ATTN(x)``: the pretrained ``BertModel`` and the
project's own ``TransformerBlock``/``SequenceModel`` with the BERT (post-LN) layout under any
attention normalisation (softmax, DNAS, HNAS, Sinkhorn, NAP, NON). The MTE layout normalises the
attention output alone, through a LayerNorm and a GELU of the heads, so its output is no sum over
input tokens; ``trace_attention_blocks`` rejects it with an error naming the block.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Mapping, Optional, Sequence

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax._extras import require
from normattn_jax.attention.module import MultiHeadAttention
from normattn_jax.models.sequence import SequenceModel
from normattn_jax.norms import LayerNorm
from normattn_jax.validation import check_int

Array = jax.Array

METHODS = ("ATTN-W", "ATTN-N", "ATTNRES-W", "ATTNRES-N", "ATTNRESLN-N")
TOKEN_TYPES = ("normal", "[MASK]", "[CLS]", "[SEP]")  # codes 0..3 of ``token_type_codes``


@flax.struct.dataclass
class AttentionBlock:
  """One post-LN attention block ``LN(x + ATTN(x))`` as it ran on a batch ``[B, n, d]``."""
  name: str = flax.struct.field(pytree_node=False)  # the block's path, e.g. "layer_0"
  x: Array                  # [B, n, d] block input
  weights: Array            # [B, h, n, n] attention weights alpha^h_ij
  attention_output: Array   # [B, n, d] ATTN(x), b_O included
  ln_input: Array           # [B, n, d] y, the real LN input
  ln_output: Array          # [B, n, d] the block output
  value_kernel: Array       # [d, h, dh]
  value_bias: Array         # [h, dh]
  out_kernel: Array         # [h, dh, d]
  out_bias: Array           # [d]
  ln_scale: Array           # [d] gamma (ones without a scale)
  ln_bias: Array            # [d] beta (zeros without a bias)
  ln_kind: str = flax.struct.field(pytree_node=False, default="standard")
  ln_epsilon: float = flax.struct.field(pytree_node=False, default=1e-12)


# ----- reading the blocks of a model -----

def _path(module: nn.Module) -> tuple:
  return tuple(module.scope.path) if module.scope is not None else ()


def _leaf(params, path: Sequence[str]):
  for name in path:
    params = params[name]
  return params


def _collect(model: nn.Module, variables: Mapping, *args, **kwargs
             ) -> tuple[list[AttentionBlock], list[tuple[Array, Array]]]:
  """The blocks of one ``model.apply`` (traceable under jit) and, per block, the largest
  ``|y - (x + ATTN(x))|`` and ``|y|`` for the post-LN check."""
  if isinstance(model, SequenceModel):  # every token's last block, whatever its head reads
    model = model.clone(all_tokens=True)
  attentions, norms = [], {}

  def interceptor(next_fun, call_args, call_kwargs, context):
    module = context.module
    if context.method_name != "__call__":
      return next_fun(*call_args, **call_kwargs)
    if isinstance(module, MultiHeadAttention):
      name = "/".join(_path(module))
      if module.head_norm or module.head_activation is not None:
        raise ValueError(f"attention {name!r} normalises or activates its heads (an MTE-layout "
                         f"block); the norm-based decomposition needs the post-LN layout "
                         f"LN(x + ATTN(x))")
      inputs_q = call_args[0] if call_args else call_kwargs["inputs_q"]
      others = [a for a in call_args[1:3] if a is not None]
      others += [call_kwargs[k] for k in ("inputs_k", "inputs_v") if call_kwargs.get(k) is not None]
      if any(other is not inputs_q for other in others):
        raise ValueError(f"attention {name!r} is not self-attention")
      call_kwargs = dict(call_kwargs, sow_weights=True)
      try:
        out = next_fun(*call_args, **call_kwargs)
      except ValueError as err:
        raise ValueError(f"attention {name!r} cannot form its weights for the analysis: "
                         f"{err} (build the model with the quadratic attention "
                         f"implementation)") from err
      weights = module.get_variable("intermediates", "attention_weights")[-1]
      attentions.append((_path(module), inputs_q, weights, out))
      return out
    if isinstance(module, LayerNorm) and module.name == "attention_norm":
      out = next_fun(*call_args, **call_kwargs)
      norms[_path(module)[:-1]] = (module, call_args[0] if call_args else call_kwargs["x"], out)
      return out
    return next_fun(*call_args, **call_kwargs)

  with nn.intercept_methods(interceptor):
    model.apply(variables, *args, mutable=["intermediates"], **kwargs)

  params = variables["params"]
  blocks, residuals = [], []
  for path, x, weights, out in attentions:
    name = "/".join(path)
    if path[:-1] not in norms:
      raise ValueError(f"attention {name!r} has no sibling LayerNorm named 'attention_norm'; "
                       f"the decomposition needs the post-LN layout LN(x + ATTN(x))")
    ln, y, ln_out = norms[path[:-1]]
    residuals.append((jnp.max(jnp.abs(y - (x + out))), jnp.max(jnp.abs(y))))
    attn = _leaf(params, path)
    ln_params = _leaf(params, path[:-1] + (ln.name,))
    d = x.shape[-1]
    blocks.append(AttentionBlock(
        name="/".join(path[:-1]), x=x, weights=weights, attention_output=out, ln_input=y,
        ln_output=ln_out, value_kernel=attn["value"]["kernel"],
        value_bias=attn["value"].get("bias", jnp.zeros(attn["value"]["kernel"].shape[1:])),
        out_kernel=attn["out"]["kernel"], out_bias=attn["out"].get("bias", jnp.zeros(d)),
        ln_scale=ln_params.get("scale", jnp.ones(d)), ln_bias=ln_params.get("bias", jnp.zeros(d)),
        ln_kind=ln.kind, ln_epsilon=float(ln.epsilon)))
  return blocks, residuals


def _check_post_ln(blocks: Sequence[AttentionBlock], residuals, rtol: float) -> None:
  for block, (residual, scale) in zip(blocks, residuals):
    if not float(residual) <= rtol * max(float(scale), 1.0):
      raise ValueError(f"the LayerNorm 'attention_norm' of {block.name!r} does not normalise "
                       f"x + ATTN(x) (e.g. an MTE-layout block); the decomposition needs the "
                       f"post-LN layout")


def trace_attention_blocks(model: nn.Module, variables: Mapping, *args,
                           rtol: float = 1e-3, **kwargs) -> list[AttentionBlock]:
  """Run ``model.apply(variables, *args, **kwargs)`` (deterministically) and return its
  attention blocks in call order, with the weights, inputs and outputs that they really saw.

  Every ``MultiHeadAttention`` must be followed by a sibling LayerNorm named ``attention_norm``
  whose input is ``x + ATTN(x)`` (checked to ``rtol`` of its scale); anything else raises a
  ValueError naming the block.

  Args:
    model: the flax model.
    variables: its variables (``{"params": ...}``).
    *args: the model's inputs, e.g. ``input_ids [B, n]``.
    rtol: the largest ``|y - (x + ATTN(x))|``, relative to ``max(|y|, 1)``.
    **kwargs: the model's keyword inputs, e.g. ``attention_mask``.

  Returns:
    One ``AttentionBlock`` per attention call.

  Raises:
    ValueError: naming the block, for an attention that is not post-LN self-attention or cannot
      form its weights.
  """
  blocks, residuals = _collect(model, variables, *args, **kwargs)
  _check_post_ln(blocks, residuals, rtol)
  return blocks


# ----- the decomposition -----

def _center(z: Array, kind: str) -> Array:
  return z - jnp.mean(z, -1, keepdims=True) if kind in ("standard", "no_scaling") else z


def ln_divisor(y: Array, kind: str, epsilon: float) -> Array:
  """``s(y)`` of the real LN input ``y [..., d]`` (1 for the kinds that do not scale).

  Args:
    y: the LN input ``[..., d]``.
    kind: the LN's kind (``norms.LAYER_NORM_KINDS``).
    epsilon: the LN's epsilon.

  Returns:
    ``[..., 1]``.
  """
  if kind in ("standard", "no_projection"):
    return jnp.sqrt(jnp.mean(jnp.square(_center(y, kind)), -1, keepdims=True) + epsilon)
  return jnp.ones(y.shape[:-1] + (1,), y.dtype)


def distribute_ln(z: Array, divisor: Array, scale: Array, kind: str) -> Array:
  """``g_y(z) = c(z) / s(y) * gamma``: LN's share of one summand ``z`` of its input ``y``.

  Args:
    z: a summand of the LN input, ``[..., d]``.
    divisor: ``ln_divisor`` of the whole input, broadcastable to ``z``.
    scale: the LN's gamma, ``[d]``.
    kind: the LN's kind.

  Returns:
    ``[..., d]``.
  """
  return _center(z, kind) / divisor * scale


def transformed_values(block: AttentionBlock) -> Array:
  """``f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h`` for every head and token, ``[B, h, n, d]``.

  Args:
    block: a traced block (``trace_attention_blocks``).
  """
  values = jnp.einsum("bnd,dhe->bnhe", block.x, block.value_kernel) + block.value_bias
  return jnp.einsum("bnhe,hed->bhnd", values, block.out_kernel)


def decompose(block: AttentionBlock) -> dict:
  """The per-token vectors of the decomposition, each ``[B, n, d]``:
  ``attn_mixing``/``attn_self`` (sum_{j!=i} / j=i of sum_h alpha f^h, before RES and LN),
  ``mixing``/``preserving`` (after RES and LN) and ``bias`` (g_y(b_O) + beta); their sum
  ``mixing + preserving + bias`` is the block output.

  Args:
    block: a traced block (``trace_attention_blocks``).

  Returns:
    ``{"attn_mixing", "attn_self", "mixing", "preserving", "bias"}`` -> ``[B, n, d]``.
  """
  f = transformed_values(block)
  total = jnp.einsum("bhij,bhjd->bid", block.weights, f)
  diagonal = jnp.diagonal(block.weights, axis1=-2, axis2=-1)  # [B, h, n]
  attn_self = jnp.einsum("bhi,bhid->bid", diagonal, f)
  attn_mixing = total - attn_self
  divisor = ln_divisor(block.ln_input, block.ln_kind, block.ln_epsilon)
  g = lambda z: distribute_ln(z, divisor, block.ln_scale, block.ln_kind)
  return {"attn_mixing": attn_mixing, "attn_self": attn_self, "mixing": g(attn_mixing),
          "preserving": g(attn_self + block.x),
          "bias": g(jnp.broadcast_to(block.out_bias, block.x.shape)) + block.ln_bias}


def token_contributions(block: AttentionBlock, index: int = 0) -> dict:
  """Token-by-token vectors of sequence ``index``, each ``[n, n, d]`` (row i = output token,
  column j = input token): ``attention`` = sum_h alpha^h_ij f^h(x_j) (ATTN alone) and
  ``block`` = F_i(x_j) = g_y(sum_h alpha^h_ij f^h(x_j)) + [i = j] g_y(x_i) (ATTN, RES and LN),
  with ``sum_j F_i(x_j) = LN(y_i) - g_y(b_O) - beta``.

  Args:
    block: a traced block (``trace_attention_blocks``).
    index: the sequence of the batch.

  Returns:
    ``{"attention", "block"}`` -> ``[n, n, d]``.
  """
  take = lambda a: a[index:index + 1]
  one = block.replace( x=take(block.x), weights=take(block.weights),
                            ln_input=take(block.ln_input))
  f = transformed_values(one)[0]                                   # [h, n, d]
  attention = jnp.einsum("hij,hjd->ijd", one.weights[0], f)
  n = attention.shape[0]
  with_res = attention + jnp.eye(n)[:, :, None] * one.x[0][None, :, :]
  divisor = ln_divisor(one.ln_input[0], block.ln_kind, block.ln_epsilon)[:, None, :]  # [n,1,1]
  return {"attention": attention,
          "block": distribute_ln(with_res, divisor, block.ln_scale, block.ln_kind)}


def _ratio(mix: Array, pres: Array) -> Array:
  total = mix + pres
  return jnp.where(total > 0, mix / jnp.where(total > 0, total, 1.0), 0.0)


def mixing_ratios(block: AttentionBlock) -> dict:
  """The five methods' mixing ratios, ``METHODS`` -> ``[B, n]`` (rows without any weight get 0).

  Args:
    block: a traced block (``trace_attention_blocks``).
  """
  norm = lambda v: jnp.linalg.norm(v, axis=-1)
  parts = decompose(block)
  w = jnp.abs(block.weights)
  row = jnp.sum(w, -1)                                             # [B, h, n]
  off = row - jnp.diagonal(w, axis1=-2, axis2=-1)
  safe = lambda a: jnp.where(a > 0, a, 1.0)
  attn_w = jnp.mean(jnp.where(row > 0, off / safe(row), 0.0), axis=1)
  attnres_w = jnp.mean(0.5 * off / (0.5 * row + 0.5), axis=1)
  attn_mix = norm(parts["attn_mixing"])
  return {
      "ATTN-W": attn_w,
      "ATTN-N": _ratio(attn_mix, norm(parts["attn_self"])),
      "ATTNRES-W": attnres_w,
      "ATTNRES-N": _ratio(attn_mix, norm(parts["attn_self"] + block.x)),
      "ATTNRESLN-N": _ratio(norm(parts["mixing"]), norm(parts["preserving"])),
  }


# ----- Table 8: the expansion rate of the attention's affine map -----

def expansion_rate(value_kernel, value_bias, out_kernel) -> float:
  """RMS singular value of the homogeneous ``(d+1) x (d+1)`` map of ``f(x) = (x W_V + b_V) W_O``
  (all heads together; row vectors ``[x, 1]``), i.e. ``sqrt(sum sigma_k^2 / (d + 1))``: the
  expected ``|f(x)| / |x|`` for a standard normal ``x``. Below 1 the map shrinks its input.

  Args:
    value_kernel: ``W_V``, ``[d, h, dh]`` (or ``[d, h * dh]``).
    value_bias: ``b_V``, ``[h, dh]``.
    out_kernel: ``W_O``, ``[h, dh, d_out]``.

  Returns:
    The rate.
  """
  value_kernel = np.asarray(value_kernel, np.float64)
  d_in = value_kernel.shape[0]
  w_v = value_kernel.reshape(d_in, -1)
  b_v = np.asarray(value_bias, np.float64).reshape(-1)
  w_o = np.asarray(out_kernel, np.float64).reshape(w_v.shape[1], -1)
  d_out = w_o.shape[1]
  v = np.zeros((d_in + 1, w_v.shape[1] + 1))
  v[:d_in, :-1], v[d_in, :-1], v[d_in, -1] = w_v, b_v, 1.0
  o = np.zeros((w_v.shape[1] + 1, d_out + 1))
  o[:-1, :d_out], o[-1, -1] = w_o, 1.0
  sigma = np.linalg.svd(v @ o, compute_uv=False)
  return float(np.sqrt(np.sum(sigma ** 2) / (d_in + 1)))


def expansion_rates(blocks: Iterable[AttentionBlock]) -> list[float]:
  """``expansion_rate`` of every traced block.

  Args:
    blocks: traced blocks (``trace_attention_blocks``).

  Returns:
    One rate per block, in order.
  """
  return [expansion_rate(b.value_kernel, b.value_bias, b.out_kernel) for b in blocks]


# ----- inputs: token types and the masking of the paper -----

@dataclasses.dataclass(frozen=True)
class Protocol:
  """How the inputs are masked and how Fig. 3's per-layer means are taken.

  Attributes:
    mask_rate: the share of each sequence's ordinary tokens chosen for masking.
    mask_prob: the probability that a chosen token becomes [MASK] (otherwise it stays).
    count_rounding: "round" or "floor" of ``mask_rate`` x the ordinary tokens (at least 1).
    per_sequence_means: Fig. 3 averages each sequence's tokens (of a type) first, then the
      sequences; otherwise every token counts once. Table 2 counts every token once either way.
  """
  mask_rate: float
  mask_prob: float
  count_rounding: str
  per_sequence_means: bool


PROTOCOLS = {
    # Section 4.1's words: "masking applied to 15% of tokens 80% of the time".
    "paper": Protocol(mask_rate=0.15, mask_prob=0.8, count_rounding="round",
                      per_sequence_means=False),
    # The authors' released scripts: max(1, floor(12% of the ordinary tokens)) per sequence, all
    # of them [MASK] (15% x 80% as one rate), and Fig. 3's values averaged per sentence first.
    "authors": Protocol(mask_rate=0.12, mask_prob=1.0, count_rounding="floor",
                        per_sequence_means=True),
}
COUNT_ROUNDINGS = ("round", "floor")


def get_protocol(name: str) -> Protocol:
  """The ``PROTOCOLS`` entry of ``name``, or a ValueError naming the choices.

  Args:
    name: "paper" or "authors".

  Returns:
    The ``Protocol``.

  Raises:
    ValueError: if ``name`` is not a key of ``PROTOCOLS``.
  """
  if name not in PROTOCOLS:
    raise ValueError(f"protocol must be one of {tuple(PROTOCOLS)}, got {name!r}")
  return PROTOCOLS[name]


def masked_count(ordinary: int, rate: float, rounding: str = "round") -> int:
  """How many of a sequence's ``ordinary`` tokens are chosen: ``rate * ordinary`` rounded
  (``"round"``) or truncated (``"floor"``), at least 1 (0 without ordinary tokens or at rate 0).

  Args:
    ordinary: the sequence's ordinary tokens.
    rate: the share chosen, in [0, 1].
    rounding: "round" or "floor".

  Returns:
    An integer in [0, ordinary].

  Raises:
    ValueError: if ``rounding`` is not one of ``COUNT_ROUNDINGS``.
  """
  if rounding not in COUNT_ROUNDINGS:
    raise ValueError(f"count_rounding must be one of {COUNT_ROUNDINGS}, got {rounding!r}")
  if ordinary == 0 or rate == 0:
    return 0
  scaled = rate * ordinary
  return min(ordinary, max(1, int(round(scaled)) if rounding == "round" else int(scaled)))

def token_type_codes(input_ids, special_ids: Mapping[str, Optional[int]]) -> np.ndarray:
  """Index into ``TOKEN_TYPES`` for every token; ``special_ids`` maps "[MASK]", "[CLS]",
  "[SEP]" to ids (None or absent for a model without that token).

  Args:
    input_ids: int token ids, any shape.
    special_ids: "[MASK]", "[CLS]", "[SEP]" -> id or None.

  Returns:
    int32 codes of ``input_ids``' shape (0 normal, 1 [MASK], 2 [CLS], 3 [SEP]).

  Raises:
    ValueError: if ``special_ids`` has another key.
  """
  unknown = set(special_ids) - set(TOKEN_TYPES[1:])
  if unknown:
    raise ValueError(f"special_ids keys must be among {TOKEN_TYPES[1:]}, got {sorted(unknown)}")
  input_ids = np.asarray(input_ids)
  codes = np.zeros(input_ids.shape, np.int32)
  for code, name in enumerate(TOKEN_TYPES):
    if code and special_ids.get(name) is not None:
      codes[input_ids == special_ids[name]] = code
  return codes


def mask_tokens(input_ids, attention_mask, *, mask_id: int, special_ids: Iterable[int],
                rate: float = 0.15, mask_prob: float = 0.8, seed: int = 0,
                count_rounding: str = "round") -> np.ndarray:
  """The input masking: in every sequence ``masked_count(m, rate, count_rounding)`` of its
  ``m`` ordinary tokens (not special, not padding) are chosen, and each chosen token becomes
  ``mask_id`` with probability ``mask_prob`` (otherwise it stays). Returns new ids.

  Args:
    input_ids: int ``[B, n]``.
    attention_mask: ``[B, n]``, nonzero = real token.
    mask_id: the id of [MASK].
    special_ids: the ids never chosen (e.g. [CLS], [SEP]).
    rate: the share of ordinary tokens chosen, in [0, 1].
    mask_prob: the probability that a chosen token becomes ``mask_id``, in [0, 1].
    seed: the seed of the choice.
    count_rounding: "round" or "floor" (``masked_count``).

  Returns:
    A copy of ``input_ids`` with the masked tokens replaced.

  Raises:
    ValueError: if ``rate`` or ``mask_prob`` is outside [0, 1] or ``count_rounding`` is unknown.
  """
  if not 0.0 <= rate <= 1.0:
    raise ValueError(f"rate must lie in [0, 1], got {rate!r}")
  if not 0.0 <= mask_prob <= 1.0:
    raise ValueError(f"mask_prob must lie in [0, 1], got {mask_prob!r}")
  if count_rounding not in COUNT_ROUNDINGS:
    raise ValueError(f"count_rounding must be one of {COUNT_ROUNDINGS}, got {count_rounding!r}")
  ids = np.array(input_ids, copy=True)
  valid = np.asarray(attention_mask).astype(bool) & ~np.isin(ids, list(special_ids))
  if rate == 0:
    return ids
  rng = np.random.default_rng(seed)
  for row in range(ids.shape[0]):
    candidates = np.flatnonzero(valid[row])
    if candidates.size == 0:
      continue
    chosen = rng.choice(candidates, masked_count(candidates.size, rate, count_rounding),
                        replace=False)
    ids[row, chosen[rng.random(chosen.size) < mask_prob]] = mask_id
  return ids


# ----- statistics -----

def _layer_mean(values: np.ndarray, selected: np.ndarray,
                per_sequence: bool) -> Optional[float]:
  """Mean of ``values`` over ``selected`` (None if nothing is): over the tokens, or over the
  sequences (rows) that have a selected token, of each row's mean."""
  if not selected.any():
    return None
  if not per_sequence:
    return float(np.mean(values[selected]))
  rows = selected.any(axis=-1)
  sums = np.sum(np.where(selected, values, 0.0), axis=-1)[rows]
  return float(np.mean(sums / selected.sum(axis=-1)[rows]))


def summarise(ratios: Sequence[Mapping[str, np.ndarray]], valid, types,
              per_sequence: bool = False) -> dict:
  """Statistics as the paper's Table 2 and Fig. 3 from per-layer ratios
  (``ratios[l][method]`` of shape ``[T]`` or ``[B, n]``), the non-padding mask and the token
  type codes of the same shape.

  Table 2's ``overall`` counts every non-padding token once per layer. Fig. 3's per-layer means
  do too, or, with ``per_sequence`` (the authors' scripts; ``[B, n]`` input), average each
  sequence's tokens of a type first and then the sequences that have one.

  Returns ``per_layer`` (method -> per-layer mean), ``per_layer_token_type`` (method -> type ->
  per-layer mean, None where a type is absent, "overall" included), ``overall`` (method ->
  {mean, max, min} over all layers and tokens) and ``token_counts`` (type -> tokens per layer).

  Args:
    ratios: per layer, ``METHODS`` -> ratios (``mixing_ratios``), each of ``valid``'s shape.
    valid: bool, True = non-padding token, ``[T]`` or ``[B, n]``.
    types: ``token_type_codes``, of ``valid``'s shape.
    per_sequence: average per sequence first (needs ``[B, n]``).

  Raises:
    ValueError: if ``valid`` marks no token, or ``per_sequence`` is set for input that is not
      ``[B, n]``.
  """
  valid = np.asarray(valid).astype(bool)
  types = np.asarray(types)
  if not valid.any():
    raise ValueError("valid marks no token: nothing to summarise")
  if per_sequence and valid.ndim != 2:
    raise ValueError(f"per_sequence means need ratios of shape [sequences, tokens], got "
                     f"{valid.shape}")
  out = {"per_layer": {}, "per_layer_token_type": {}, "overall": {},
         "token_counts": {name: int(np.sum(valid & (types == code)))
                          for code, name in enumerate(TOKEN_TYPES)},
         "per_sequence_means": bool(per_sequence)}
  for method in METHODS:
    values = [np.asarray(r[method], np.float64) for r in ratios]
    layers = [v[valid] for v in values]
    out["per_layer"][method] = [_layer_mean(v, valid, per_sequence) for v in values]
    by_type = {"overall": out["per_layer"][method]}
    for code, name in enumerate(TOKEN_TYPES):
      by_type[name] = [_layer_mean(v, valid & (types == code), per_sequence) for v in values]
    out["per_layer_token_type"][method] = by_type
    everything = np.concatenate(layers)
    out["overall"][method] = {"mean": float(np.mean(everything)),
                              "max": float(np.max(everything)),
                              "min": float(np.min(everything))}
  return out


# ----- Table 3: mixing ratio against word-frequency rank -----

def frequency_ranks(tokens: Sequence[str], frequencies: Mapping[str, float]) -> np.ndarray:
  """Frequency rank of each token (1 = most frequent; ties share the best rank) among the
  token types of ``frequencies``; tokens without a positive frequency get NaN.

  Args:
    tokens: the tokens to rank.
    frequencies: token type -> relative frequency.

  Returns:
    float64 ``[len(tokens)]``.
  """
  table = np.sort(np.array([f for f in frequencies.values() if f > 0], np.float64))
  f = np.array([frequencies.get(token, 0.0) for token in tokens], np.float64)
  higher = table.size - np.searchsorted(table, f, side="right")  # types strictly more frequent
  return np.where(f > 0, 1.0 + higher, np.nan)


def wordfreq_frequencies(vocabulary: Iterable[str], lang: str = "en") -> dict:
  """English word frequencies (the ``wordfreq`` package's data) of the whole-word tokens of a
  vocabulary; word pieces ("##...") and tokens that ``wordfreq`` does not know get 0.

  Args:
    vocabulary: the tokens (e.g. ``tokenizer.get_vocab()``'s keys); bracketed tokens get 0 too.
    lang: ``wordfreq``'s language code.

  Returns:
    token -> relative frequency.

  Raises:
    ImportError: if ``wordfreq`` is not installed (the ``analysis`` extra).
  """
  wordfreq = require("wordfreq", "analysis")

  out = {}
  for token in vocabulary:
    if token.startswith("##") or (token.startswith("[") and token.endswith("]")):
      out[token] = 0.0
    else:
      out[token] = float(wordfreq.word_frequency(token, lang))
  return out


def frequency_correlation(ratios: Sequence[Mapping[str, np.ndarray]], ranks, valid,
                          special) -> dict:
  """Spearman's rho between the frequency rank and the layer-mean mixing ratio of every
  token occurrence with a rank (Table 3), method -> {"with_special", "without_special",
  "tokens"}; ``special`` marks [CLS]/[SEP] occurrences (left out in "without_special").

  Args:
    ratios: per layer, ``METHODS`` -> ratios (``mixing_ratios``), each of ``valid``'s shape.
    ranks: each token's frequency rank (NaN: none), of ``valid``'s shape.
    valid: bool, True = non-padding token.
    special: bool, True at [CLS]/[SEP].

  Returns:
    ``METHODS`` -> ``{"with_special", "without_special", "tokens"}``; rho is NaN for 2 tokens
    or fewer.

  Raises:
    ImportError: if scipy is not installed (the ``analysis`` extra).
  """
  spearmanr = require("scipy.stats", "analysis").spearmanr

  ranks = np.asarray(ranks, np.float64)
  keep = np.asarray(valid).astype(bool) & np.isfinite(ranks)
  plain = keep & ~np.asarray(special).astype(bool)
  out = {}
  for method in METHODS:
    mean = np.mean([np.asarray(r[method], np.float64) for r in ratios], axis=0)
    rho = (lambda sel: float(spearmanr(ranks[sel], mean[sel]).statistic) if sel.sum() > 2
           else float("nan"))
    out[method] = {"with_special": rho(keep), "without_special": rho(plain),
                   "tokens": int(keep.sum())}
  return out


# ----- one call for a HuggingFace-format BERT -----

def special_token_ids(tokenizer) -> dict:
  """``{"[MASK]", "[CLS]", "[SEP]"} -> id`` of a ``tokenizers.Tokenizer`` (None if absent).

  Args:
    tokenizer: a ``tokenizers.Tokenizer``.

  Returns:
    "[MASK]", "[CLS]", "[SEP]" -> id or None.
  """
  return {name: tokenizer.token_to_id(name) for name in TOKEN_TYPES[1:]}


def analyze_bert(model: nn.Module, params: Mapping, tokenizer, texts: Sequence, *,
                 protocol: str = "paper", mask_rate: Optional[float] = None,
                 mask_prob: Optional[float] = None, seed: int = 0,
                 batch_size: int = 16, max_length: int = 128,
                 frequencies: Optional[Mapping[str, float]] = None) -> dict:
  """The paper's analysis of a BERT (``models.bert.BertModel``) on ``texts`` (a text or a
  ``(first, second)`` pair each), under a masking and averaging ``protocol`` (``PROTOCOLS``:
  "paper" or "authors"; ``mask_rate`` and ``mask_prob``, when given, replace its own):

  - ``summary``: ``summarise`` of the ratios with ``mask_rate`` of the ordinary tokens masked
    (``mask_tokens``; 0 for none), as Table 2 and Fig. 3;
  - ``expansion_rate``: per layer and {mean, max, min} (Table 8);
  - ``frequency_spearman``: ``frequency_correlation`` on the unmasked texts (Table 3), with
    ``frequencies`` (token -> relative frequency; default ``wordfreq_frequencies`` of the
    vocabulary, [CLS]/[SEP] at their share of the analysed tokens), or None if ``wordfreq``
    is not installed and no frequencies are given.

  Args:
    model: a ``BertModel`` with quadratic attention.
    params: its params.
    tokenizer: its ``tokenizers.Tokenizer``.
    texts: the texts, or ``(first, second)`` pairs.
    protocol: a key of ``PROTOCOLS``.
    mask_rate: the share of ordinary tokens chosen, in [0, 1]; None: the protocol's.
    mask_prob: the probability that a chosen token becomes [MASK], in [0, 1]; None: the
      protocol's.
    seed: the seed of the masking.
    batch_size: sequences per model call, a positive integer.
    max_length: the most tokens per sequence.
    frequencies: token -> relative frequency, or None.

  Returns:
    ``summary``, ``expansion_rate`` and ``frequency_spearman`` as above, plus the settings
    (``protocol``, ``mask_rate``, ``mask_prob``, ``count_rounding``) and ``num_sequences``,
    ``num_tokens``, ``num_masked``.

  Raises:
    ValueError: if a setting is out of range, the model is not post-LN, or ``mask_rate > 0``
      and the tokenizer has no [MASK].
  """
  from normattn_jax.models.bert import tokenize

  chosen = get_protocol(protocol)
  mask_rate = chosen.mask_rate if mask_rate is None else mask_rate
  mask_prob = chosen.mask_prob if mask_prob is None else mask_prob
  if not 0.0 <= mask_rate <= 1.0:
    raise ValueError(f"mask_rate must lie in [0, 1], got {mask_rate!r}")
  if not 0.0 <= mask_prob <= 1.0:
    raise ValueError(f"mask_prob must lie in [0, 1], got {mask_prob!r}")
  check_int("batch_size", batch_size)
  special = special_token_ids(tokenizer)
  encoded = tokenize(tokenizer, list(texts), max_length)  # one length for all: one compile
  found = {}

  @jax.jit
  def batch_ratios(params, input_ids, attention_mask, token_type_ids):
    blocks, residuals = _collect(model, {"params": params}, input_ids,
                                 attention_mask=attention_mask, token_type_ids=token_type_ids)
    return [mixing_ratios(b) for b in blocks], blocks, residuals

  def run(input_ids):
    # Pad the batch count with empty rows (all padding) so that every call has one shape.
    rows = len(input_ids)
    total = -(-rows // batch_size) * batch_size
    pad = lambda a: np.concatenate([a, np.zeros((total - rows,) + a.shape[1:], a.dtype)])
    ids, mask, types = (pad(a) for a in (input_ids, encoded["attention_mask"],
                                         encoded["token_type_ids"]))
    per_batch = []
    for start in range(0, total, batch_size):
      sl = slice(start, start + batch_size)
      ratios, blocks, residuals = batch_ratios(params, ids[sl], mask[sl], types[sl])
      if "blocks" not in found:  # the layout check (errors name the block); weights for Table 8
        _check_post_ln(blocks, residuals, 1e-3)
        found["blocks"] = blocks
      per_batch.append([{m: np.asarray(r[m]) for m in METHODS} for r in ratios])
    return [{m: np.concatenate([b[layer][m] for b in per_batch])[:rows] for m in METHODS}
            for layer in range(len(per_batch[0]))]

  valid = encoded["attention_mask"].astype(bool)
  plain_ids = encoded["input_ids"]
  if mask_rate > 0:
    if special["[MASK]"] is None:
      raise ValueError("mask_rate > 0 needs a [MASK] token, and the tokenizer has none")
    masked_ids = mask_tokens(plain_ids, valid, mask_id=special["[MASK]"],
                             special_ids=[i for i in special.values() if i is not None],
                             rate=mask_rate, mask_prob=mask_prob, seed=seed,
                             count_rounding=chosen.count_rounding)
  else:
    masked_ids = plain_ids
  masked_ratios = run(masked_ids)
  summary = summarise(masked_ratios, valid, token_type_codes(masked_ids, special),
                      per_sequence=chosen.per_sequence_means)
  rates = expansion_rates(found["blocks"])
  out = {"summary": summary, "protocol": protocol, "mask_rate": mask_rate,
         "mask_prob": mask_prob, "count_rounding": chosen.count_rounding,
         "num_sequences": int(len(plain_ids)),
         "num_tokens": int(valid.sum()),
         "num_masked": int(np.sum(masked_ids != plain_ids)),
         "expansion_rate": {"per_layer": rates, "mean": float(np.mean(rates)),
                            "max": float(np.max(rates)), "min": float(np.min(rates))}}

  if frequencies is None:
    try:
      frequencies = wordfreq_frequencies(tokenizer.get_vocab())
    except ImportError:
      out["frequency_spearman"] = None
      return out
    frequencies = dict(frequencies)
    for name in ("[CLS]", "[SEP]"):
      if special[name] is not None:
        frequencies[name] = float(np.sum(plain_ids[valid] == special[name]) / valid.sum())
  plain_ratios = masked_ratios if masked_ids is plain_ids else run(plain_ids)
  vocab = {i: t for t, i in tokenizer.get_vocab().items()}
  id_ranks = frequency_ranks([vocab.get(i, "") for i in range(max(vocab) + 1)], frequencies)
  ranks = id_ranks[plain_ids]
  is_special = np.isin(plain_ids, [special[n] for n in ("[CLS]", "[SEP]")
                                   if special[n] is not None])
  out["frequency_spearman"] = frequency_correlation(plain_ratios, ranks, valid, is_special)
  return out


def read_texts(path: str) -> list:
  """The sequences of a text file: one per non-empty line, a tab splitting a line into a
  sentence pair.

  Args:
    path: the file.

  Returns:
    Texts and ``(first, second)`` pairs, as ``analyze_bert`` takes them.

  Raises:
    FileNotFoundError: if ``path`` is not a readable file.
    ValueError: for a line of more than two tab-separated parts, or a file without text.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(f"--text_file must be a readable file, got {path!r}")
  texts = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if line:
        parts = line.split("\t")
        if len(parts) > 2:
          raise ValueError(f"--text_file {path!r}: a line holds one sequence or a tab-separated "
                           f"pair, got {len(parts)} tab-separated parts")
        texts.append(tuple(parts) if len(parts) == 2 else line)
  if not texts:
    raise ValueError(f"--text_file {path!r} has no non-empty line")
  return texts


def token_contribution_shares(model: nn.Module, params: Mapping, tokenizer, text) -> tuple:
  """Fig. 1: per layer, ``|sum_h alpha f(x_j)|`` (ATTN) and ``|F_i(x_j)|`` (ATTN + RES + LN) of one
  sequence (``token_contributions``), each row divided by its sum.

  Args:
    model: a ``BertModel``.
    params: its params.
    tokenizer: its ``tokenizers.Tokenizer``.
    text: a text or a ``(first, second)`` pair.

  Returns:
    ``(tokens, shares)``: the sequence's token strings and, per layer, ``{"attention",
    "block"}`` -> float64 ``[n, n]`` (row i = output token, column j = input token).
  """
  from normattn_jax.models.bert import tokenize

  batch = tokenize(tokenizer, [text])
  blocks = trace_attention_blocks(model, {"params": params}, batch["input_ids"],
                                  attention_mask=batch["attention_mask"],
                                  token_type_ids=batch["token_type_ids"])
  vocab = {i: t for t, i in tokenizer.get_vocab().items()}
  tokens = [vocab[int(i)] for i in batch["input_ids"][0]]
  shares = []
  for block in blocks:
    contrib = token_contributions(block, 0)
    layer = {}
    for key in ("attention", "block"):
      norms = np.linalg.norm(np.asarray(contrib[key], np.float64), axis=-1)
      layer[key] = norms / norms.sum(1, keepdims=True)
    shares.append(layer)
  return tokens, shares


def output_names(protocol: str) -> dict:
  """The files of a run under ``protocol``: another protocol than "paper" appends its name;
  Fig. 1 shows one unmasked sequence, the same under every protocol: one file."""
  suffix = "" if protocol == "paper" else f"_{protocol}"
  return {"mixing": f"mixing{suffix}.json", "mixing_layers": f"mixing_layers{suffix}.png",
          "mixing_tokens": "mixing_tokens.png"}


def run_record(result: dict, model_config, *, model: str, text_file: str, protocol: str,
               seed: int) -> dict:
  """What ``mixing.json`` stores of an ``analyze_bert`` result: the settings, the model's
  shape and every table.

  Args:
    result: ``analyze_bert``'s result.
    model_config: the model's ``BertConfig``.
    model: how the model is named in the record (a path, or the bundled model's name).
    text_file: the texts' file, as the record names it.
    protocol: the protocol run.
    seed: the masking's seed.

  Returns:
    The record (``seconds`` is the caller's to add).
  """
  summary = result["summary"]
  return {
      "model": model, "text_file": text_file,
      "num_layers": model_config.num_hidden_layers, "hidden_size": model_config.hidden_size,
      "num_heads": model_config.num_attention_heads,
      "protocol": protocol, "mask_rate": result["mask_rate"],
      "mask_prob": result["mask_prob"], "count_rounding": result["count_rounding"],
      "per_sequence_means": summary["per_sequence_means"], "seed": seed,
      "num_sequences": result["num_sequences"], "num_tokens": result["num_tokens"],
      "num_masked": result["num_masked"],
      "per_layer": summary["per_layer"], "overall": summary["overall"],
      "per_layer_token_type": summary["per_layer_token_type"],
      "token_counts_per_layer": summary["token_counts"],
      "expansion_rate": result["expansion_rate"],
      "frequency_spearman": result["frequency_spearman"],
      "frequency_source": "wordfreq (en) word frequencies; [CLS]/[SEP] at their share of the "
                          "analysed tokens; word pieces and tokens unknown to wordfreq left out",
  }


def table_lines(result: dict) -> list[str]:
  """Table 2 (mean, max, min per method, %), Table 3's Spearman rho and Table 8's expansion
  rate of an ``analyze_bert`` result, as text lines."""
  lines = [f"{'method':<12} {'mean':>6} {'max':>6} {'min':>6}   (%)  Spearman rho vs "
           "frequency rank"]
  rho = result["frequency_spearman"]
  for method in METHODS:
    o = result["summary"]["overall"][method]
    rho_text = "" if rho is None else (f"{rho[method]['with_special']:+.2f} "
                                       f"(w/o special {rho[method]['without_special']:+.2f})")
    lines.append(f"{method:<12} {100 * o['mean']:6.1f} {100 * o['max']:6.1f} "
                 f"{100 * o['min']:6.1f}        {rho_text}")
  e = result["expansion_rate"]
  lines.append(f"expansion rate: mean {e['mean']:.2f}, min {e['min']:.2f}, max {e['max']:.2f}; "
               f"per layer {', '.join(f'{r:.2f}' for r in e['per_layer'])}")
  return lines
