"""``CausalLM``: a GPT-2-style decoder built from the project's ``MultiHeadAttention`` and
``LayerNorm``, with a choice of the LayerNorm before each attention.

GPT-2's layout: token and learned position embeddings, pre-LN blocks
``x + ATTN(LN_1(x))`` then ``x + MLP(LN_2(x))`` (GELU, tanh form, 4x wide), a final LayerNorm and
the output projection tied to the token embedding; normal(0.02) initialisation, the residual
output projections scaled by ``1 / sqrt(2 * num_layers)``.

Brody et al. train it with ``LN_1`` of kind "standard" and "no_scaling" (projection only) and
ask which keys no query can select. As in their set-up, ``LN_1`` has no gain or bias and the
query, key and value projections no bias, so the keys of a layer are a linear image of
``LN_1``'s output: ``capture_attention_inputs`` returns it (and its input) for every layer.

The attention's ``normalization`` and the ``positional`` encoding are fields, softmax and
GPT-2's learned positions by default; ``positional="none"`` (NoPE) leaves position to the causal
mask alone, so the model runs at any length (the report card's length generalisation).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from normattn_jax.attention.module import MultiHeadAttention
from normattn_jax.attention.module_spec import AttentionModuleSpec, check_module_spec
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.norms import LayerNorm, check_layer_norm_kind
from normattn_jax.validation import check_int

__all__ = ["CausalLM", "DecoderBlock", "capture_attention_inputs", "count_parameters",
           "init_params", "next_token_loss"]

Array = jax.Array

# The names under which each block sows the input and output of its LayerNorm before attention,
# and its output (the residual stream after the block).
NORM_INPUTS, ATTENTION_INPUTS = "pre_attention_norm_inputs", "attention_inputs"
BLOCK_OUTPUTS = "block_outputs"
# The position encodings: GPT-2's learned embeddings, or none (NoPE: the causal mask alone).
POSITIONALS = ("learned", "none")


class DecoderBlock(nn.Module):
  """One pre-LN GPT-2 block; sows ``NORM_INPUTS``, ``ATTENTION_INPUTS`` and ``BLOCK_OUTPUTS``
  ([..., n, d]), and with ``sow_weights`` its attention's weights."""
  num_heads: int
  normalization: Union[str, AttentionSpec] = "softmax"
  pre_attention_norm_kind: str = "standard"
  mlp_ratio: int = 4
  dropout_rate: float = 0.0
  layer_norm_epsilon: float = 1e-5
  init_std: float = 0.02
  residual_init_std: float = 0.02
  attention_module: AttentionModuleSpec = AttentionModuleSpec()
  allow_future_leak: bool = False

  @nn.compact
  def __call__(self, x: Array, deterministic: bool = True, sow_weights: bool = False) -> Array:
    d = x.shape[-1]
    init = nn.initializers.normal(self.init_std)
    residual_init = nn.initializers.normal(self.residual_init_std)
    drop = lambda h: nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
    self.sow("intermediates", NORM_INPUTS, x)
    keys = LayerNorm(kind=self.pre_attention_norm_kind, epsilon=self.layer_norm_epsilon,
                     use_scale=False, use_bias=False, name="pre_attention_norm")(x)
    self.sow("intermediates", ATTENTION_INPUTS, keys)
    attended = MultiHeadAttention(
        num_heads=self.num_heads, use_bias=False, kernel_init=init, out_kernel_init=residual_init,
        dropout_rate=self.dropout_rate, normalization=self.normalization, name="attention",
        allow_future_leak=self.allow_future_leak, **self.attention_module.module_kwargs())(
            keys, causal=True, deterministic=deterministic, sow_weights=sow_weights)
    # GPT-2's output projection has a bias; the query, key and value ones are left out.
    attended = attended + self.param("attention_bias", nn.initializers.zeros, (d,))
    x = x + drop(attended)
    h = LayerNorm(epsilon=self.layer_norm_epsilon, name="pre_mlp_norm")(x)
    h = nn.Dense(self.mlp_ratio * d, kernel_init=init, name="mlp_in")(h)
    h = nn.Dense(d, kernel_init=residual_init, name="mlp_out")(nn.gelu(h, approximate=True))
    x = x + drop(h)
    self.sow("intermediates", BLOCK_OUTPUTS, x)
    return x


class CausalLM(nn.Module):
  """Tokens ``[..., n]`` (int) -> next-token logits ``[..., n, vocab_size]``.

  Every attention is causal (query i sees the keys j <= i), so use a causal-safe
  normalisation (the table in :doc:`/guides/normalisations`): DNAS, HNAS and Sinkhorn also
  normalise each key over all the queries, later ones included.

  Attributes:
    vocab_size: token ids lie in ``[0, vocab_size)``.
    max_len: the number of learned positions, the longest sequence (no limit with
      ``positional="none"``).
    d_model: the width of the residual stream (Brody et al.: 8).
    num_layers: the number of blocks (4).
    num_heads: the heads of each attention (4).
    mlp_ratio: the MLP's width over ``d_model`` (4).
    pre_attention_norm_kind: the kind of the LayerNorm before each attention (the modules
      ``pre_attention_norm``; ``norms.LAYER_NORM_KINDS``; "no_scaling" is Brody et al.'s
      model without scaling). The other LayerNorms are standard.
    dropout_rate: GPT-2's embedding, attention and residual dropout (active when not
      ``deterministic``; needs a "dropout" rng).
    layer_norm_epsilon: the LayerNorms' epsilon.
    init_std: the standard deviation of the normal initialisation.
    attention_module: every attention's ``MultiHeadAttention`` options
      (``AttentionModuleSpec``: its implementation and additions).
    normalization: every attention's normalisation (a registered name or an
      ``AttentionSpec``).
    positional: "learned" (GPT-2's position embeddings) or "none" (NoPE: no position
      embedding, the causal mask alone tells positions apart); ``POSITIONALS``.
    - allow_future_leak: build it with a normalisation that is not causal-safe (DNAS, HNAS,
      Sinkhorn normalise over the queries, so each position's output depends on the later
      positions and the next-token loss sees the answer); refused without it
      (``registry.Normalization.causal_safe``).
  """
  vocab_size: int
  max_len: int
  d_model: int = 8
  num_layers: int = 4
  num_heads: int = 4
  mlp_ratio: int = 4
  pre_attention_norm_kind: str = "standard"
  dropout_rate: float = 0.0
  layer_norm_epsilon: float = 1e-5
  init_std: float = 0.02
  attention_module: AttentionModuleSpec = AttentionModuleSpec()
  normalization: Union[str, AttentionSpec] = "softmax"
  positional: str = "learned"
  allow_future_leak: bool = False

  def __post_init__(self):
    for name in ("vocab_size", "max_len", "d_model", "num_layers", "num_heads", "mlp_ratio"):
      check_int(name, getattr(self, name))
    if self.d_model % self.num_heads:
      raise ValueError(f"num_heads ({self.num_heads}) must divide d_model ({self.d_model})")
    check_module_spec(self.attention_module, self.d_model // self.num_heads)
    check_layer_norm_kind(self.pre_attention_norm_kind, "pre_attention_norm_kind")
    if not 0.0 <= self.dropout_rate < 1.0:
      raise ValueError(f"dropout_rate must lie in [0, 1), got {self.dropout_rate!r}")
    if not self.layer_norm_epsilon >= 0:
      raise ValueError(f"layer_norm_epsilon must be >= 0, got {self.layer_norm_epsilon!r}")
    if not self.init_std > 0:
      raise ValueError(f"init_std must be > 0, got {self.init_std!r}")
    if self.positional not in POSITIONALS:
      raise ValueError(f"positional must be one of {POSITIONALS}, got {self.positional!r}")
    spec = AttentionSpec.of(self.normalization)
    spec.resolved()  # an unknown name or option fails here
    spec.normalization.check_causal(causal=True, allow_future_leak=self.allow_future_leak,
                                    name=str(spec), what="a CausalLM's causal attention")
    super().__post_init__()

  @nn.compact
  def __call__(self, tokens: Array, deterministic: bool = True,
               sow_weights: bool = False) -> Array:
    """The next-token logits of each position.

    Args:
      tokens: int token ids ``[..., n]``, ``n <= max_len`` with learned positions.
      deterministic: no dropout when True.
      sow_weights: each attention sows its weights (``intermediates``, under
        ``block_<layer>/attention/attention_weights``; it takes the quadratic path).

    Returns:
      The logits ``[..., n, vocab_size]``: position t's predict token t + 1.
    """
    n = tokens.shape[-1]
    if self.positional == "learned" and n > self.max_len:
      raise ValueError(f"the sequence length {n} exceeds max_len={self.max_len}")
    init = nn.initializers.normal(self.init_std)
    embed = nn.Embed(self.vocab_size, self.d_model, embedding_init=init, name="token_embedding")
    positions = (self.param("position_embedding", init, (self.max_len, self.d_model))[:n]
                 if self.positional == "learned" else 0.0)
    x = embed(tokens) + positions
    x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    residual_std = self.init_std / np.sqrt(2 * self.num_layers)
    for layer in range(self.num_layers):
      x = DecoderBlock(
          num_heads=self.num_heads, normalization=self.normalization,
          pre_attention_norm_kind=self.pre_attention_norm_kind, mlp_ratio=self.mlp_ratio,
          dropout_rate=self.dropout_rate, layer_norm_epsilon=self.layer_norm_epsilon,
          init_std=self.init_std, residual_init_std=residual_std,
          attention_module=self.attention_module, allow_future_leak=self.allow_future_leak,
          name=f"block_{layer}")(x, deterministic, sow_weights)
    x = LayerNorm(epsilon=self.layer_norm_epsilon, name="final_norm")(x)
    return embed.attend(x)


def next_token_loss(logits: Array, tokens: Array) -> Array:
  """Mean cross-entropy of predicting ``tokens[..., t + 1]`` from ``logits[..., t, :]``."""
  return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits[..., :-1, :],
                                                                   tokens[..., 1:]))


def capture_attention_inputs(model: CausalLM, variables: Mapping[str, Any],
                             tokens: Array) -> dict:
  """The vectors each layer's attention sees, from one deterministic forward pass.

  Args:
    model: the ``CausalLM``.
    variables: its variables (``{"params": ...}``).
    tokens: int ids ``[..., n]``.

  Returns:
    ``{"norm_inputs", "attention_inputs"}``, each ``[num_layers, ..., n, d_model]``: the input
    and the output of the LayerNorm before each attention (the keys and queries are linear
    images of the output).
  """
  _, state = model.apply(variables, tokens, mutable=["intermediates"])
  blocks = state["intermediates"]
  stack = lambda name: jnp.stack([blocks[f"block_{layer}"][name][0]
                                  for layer in range(model.num_layers)])
  return {"norm_inputs": stack(NORM_INPUTS), "attention_inputs": stack(ATTENTION_INPUTS)}


def count_parameters(params) -> int:
  """The number of scalars in a parameter tree."""
  return int(sum(np.prod(np.shape(leaf)) for leaf in jax.tree.leaves(params)))


def init_params(model: CausalLM, key: Array, seq_len: Optional[int] = None):
  """``model``'s parameters for sequences of ``seq_len`` (default ``max_len``) tokens."""
  tokens = jnp.zeros((1, seq_len or model.max_len), jnp.int32)
  return model.init(key, tokens)["params"]
