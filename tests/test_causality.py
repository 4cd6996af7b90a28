"""Causal safety: no causal call lets an earlier output depend on a later input, unless asked.

Every registered normalisation declares ``causal_safe``; the property below checks the
declaration on each of its paths (the gradient of an earlier output with respect to a later
query, key or value is exactly 0), and the refusals check that a causal call of one that is not
causal-safe (DNAS, HNAS, Sinkhorn) is stopped before anything runs, at every entry point.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import normattn_jax as na
from normattn_jax import nnx as na_nnx
from normattn_jax.attention import causality, fast, fused, registry
from normattn_jax.attention.module import check_decodable
from normattn_jax.models.causal_lm import CausalLM

H, N, D = 2, 5, 4
LEAKING = ("dnas", "hnas", "sinkhorn")  # the built-ins that normalise over the queries
PATHS = {"quadratic": lambda norm: True, "fast": lambda norm: norm.fast is not None,
         "fused": lambda norm: norm.fused is not None}


def _qkv(seed: int = 0):
  keys = jax.random.split(jax.random.key(seed), 3)
  return tuple(jax.random.normal(k, (H, N, D)) for k in keys)


def _future_dependence(path: str, seed: int = 0, options: dict = None,
                       block_size: int = 2) -> dict:
  """``future_dependence`` of every registered normalisation with ``path``, in one program: the
  causal-safe ones as they are, the leaking built-ins with the opt-in (the positive control);
  blocks of 2 queries, so that the blockwise paths cross blocks."""
  names = [n for n in registry.names() if PATHS[path](registry.get(n))
           and (registry.get(n).causal_safe or n in LEAKING)]

  @jax.jit
  def measure(q, k, v):
    return {n: causality.future_dependence(
        registry.get(n), path, q, k, v, options=(options or {}).get(n),
        allow_future_leak=n in LEAKING, block_size=block_size) for n in names}
  return {n: float(x) for n, x in measure(*_qkv(seed)).items()}


def _assert_claims_hold(found: dict, path: str) -> None:
  assert set(LEAKING) <= set(found) or path != "quadratic"
  for name, worst in found.items():
    if name in LEAKING:
      assert worst > 1e-3, (name, path, worst)
    else:
      assert worst == 0.0, (name, path, worst)


@pytest.mark.parametrize("path", tuple(PATHS))
def test_no_earlier_output_depends_on_a_later_input_where_causal_safety_is_claimed(path):
  """Exactly 0 for every causal-safe normalisation on every path it has; DNAS, HNAS and
  Sinkhorn (with the opt-in) depend on the later positions, so the measure can see a leak."""
  _assert_claims_hold(_future_dependence(path), path)


@pytest.mark.slow
@pytest.mark.parametrize("path", tuple(PATHS))
@pytest.mark.parametrize("seed,block_size", [(1, 1), (2, 3), (3, 256)])
def test_causal_safety_holds_at_other_inputs_options_and_blocks(path, seed, block_size):
  """Other inputs, one block per query up to one block for all, and other options."""
  options = {"sinkhorn": {"sinkhorn_iters": 1 + seed}, "hnas": {"hybrid_init": 0.25 * seed},
             "softpick": {"softpick_eps": 0.0}}
  _assert_claims_hold(_future_dependence(path, seed, options, block_size), path)


def test_every_builtin_declares_causal_safety_and_the_leaking_ones_do_not():
  for name in registry.BUILTIN_NORMALIZATIONS:
    norm = registry.get(name)
    assert norm.causal_safe == (name not in LEAKING), name
    assert norm.causal_safe != norm.normalizes_over_queries, name
  assert set(registry.causal_safe_names()) >= set(registry.BUILTIN_NORMALIZATIONS) - set(LEAKING)


def _refused(call):
  with pytest.raises(ValueError, match="allow_future_leak=True"):
    call()


@pytest.mark.parametrize("name", LEAKING)
def test_every_entry_point_refuses_a_causal_call_before_tracing(name):
  """The functions with a causal flag, the registry's paths, the Linen and NNX modules (the flag
  and a concrete causal mask) and CausalLM: each refuses, naming the opt-in, before anything
  runs (inside jit: while tracing, before anything is compiled)."""
  norm = registry.get(name)
  q, k, v = _qkv()
  params = norm.initial_params(H)
  extra = {"hnas": (0.5,), "sinkhorn": (3,)}.get(name, ())
  swap = lambda x: jnp.swapaxes(x, 0, 1)
  _refused(lambda: getattr(fast, f"{name}_attention")(q, k, v, *extra, causal=True))
  _refused(lambda: getattr(fused, f"{name}_attention")(swap(q), swap(k), swap(v), *extra,
                                                      causal=True))
  _refused(lambda: norm.fast_attention(q, k, v, params, causal=True))
  _refused(lambda: norm.fused_attention(swap(q), swap(k), swap(v), params, causal=True))
  _refused(lambda: causality.causal_outputs(norm, "quadratic", q, k, v))
  x = jnp.ones((1, N, 8))
  key = jax.random.key(0)
  linen = na.MultiHeadAttention(num_heads=2, normalization=name)
  traced = jax.jit(lambda x: linen.init(key, x, causal=True))
  _refused(lambda: traced(x))
  # a mask is read where it is concrete: these calls run eagerly
  _refused(lambda: linen.init(key, x, mask=nn.make_causal_mask(x[..., 0])))
  module = na_nnx.MultiHeadAttention(2, 8, normalization=name, decode=False, rngs=nnx.Rngs(0))
  _refused(lambda: jax.jit(lambda x: module(x, is_causal=True))(x))
  _refused(lambda: module(x, mask=nnx.make_causal_mask(x[..., 0])))
  _refused(lambda: CausalLM(vocab_size=7, max_len=N, normalization=name))
  # what a causal call is not: a padding mask; and a traced mask is not read
  real = jnp.arange(N) < 3
  linen.init(key, x, mask=real[:, None] & real[None, :])
  jax.jit(lambda x, m: module(x, mask=m))(x, nnx.make_causal_mask(x[..., 0]))


def test_the_opt_in_computes_the_leaking_call():
  """With allow_future_leak=True the causal call runs and equals the quadratic weights under
  tril (Linen, NNX and the fast path), and CausalLM builds."""
  x = jax.random.normal(jax.random.key(1), (1, N, 8))
  linen = na.MultiHeadAttention(num_heads=2, normalization="dnas", allow_future_leak=True)
  fast_linen = linen.clone(implementation="fast")

  @jax.jit
  def by_flag(x):
    """The variables, and the quadratic and fast causal calls (the mask's call below runs
    eagerly: a mask is read where it is concrete)."""
    variables = linen.init(jax.random.key(0), x, causal=True)
    return (variables, linen.apply(variables, x, causal=True),
            fast_linen.apply(variables, x, causal=True))
  variables, quadratic, fast_path = by_flag(x)
  by_mask = linen.apply(variables, x, mask=nn.make_causal_mask(x[..., 0]))
  np.testing.assert_allclose(quadratic, by_mask, atol=1e-6)
  np.testing.assert_allclose(fast_path, quadratic, atol=1e-5)
  module = na_nnx.MultiHeadAttention(2, 8, normalization="dnas", decode=False,
                                     allow_future_leak=True, rngs=nnx.Rngs(0))
  assert jax.jit(lambda x: module(x, is_causal=True))(x).shape == x.shape
  CausalLM(vocab_size=7, max_len=N, normalization="sinkhorn", allow_future_leak=True)
  with pytest.raises(TypeError, match="allow_future_leak must be True or False"):
    fast.dnas_attention(*_qkv(), causal=True, allow_future_leak="yes")


def test_causal_masks_are_told_apart_from_other_masks():
  tril = np.tril(np.ones((4, 4), bool))
  assert causality.is_causal_mask(tril)
  assert causality.is_causal_mask(tril.astype(np.float32)[None, None])  # flax's 0/1 masks
  assert causality.is_causal_mask(np.tril(np.ones((3, 5), bool), 2))    # aligned at the ends
  assert causality.is_causal_mask(np.tril(np.ones((5, 3), bool)))       # at the starts
  assert not causality.is_causal_mask(np.ones((4, 4), bool))
  assert not causality.is_causal_mask(np.eye(4, dtype=bool))     # no key seen by two queries
  assert not causality.is_causal_mask(np.ones((1, 4), bool))     # one query: no later one
  assert not causality.is_causal_mask(None)
  seen = []
  jax.jit(lambda m: seen.append(causality.is_causal_mask(m)) or m)(jnp.asarray(tril))
  assert seen == [False]  # a traced mask cannot be read, so it is not judged


def test_a_plugin_is_not_causal_safe_until_it_says_so():
  """The default is False (a wrong True would be silent); True with normalizes_over_queries is
  refused at registration, and a flag that is not a bool too."""
  weights = registry.get("softmax").weights
  plugin = registry.Normalization("row_plugin_causality_test", weights)
  registry.register(plugin)
  try:
    assert not plugin.causal_safe
    with pytest.raises(ValueError, match="not declared causal-safe"):
      na.MultiHeadAttention(num_heads=2, normalization=plugin.name).init(
          jax.random.key(0), jnp.ones((1, N, 8)), causal=True)
    registry.register(registry.Normalization(plugin.name, weights, causal_safe=True),
                      replace=True)
    na.MultiHeadAttention(num_heads=2, normalization=plugin.name).init(
        jax.random.key(0), jnp.ones((1, N, 8)), causal=True)
  finally:
    registry.unregister(plugin.name)
  with pytest.raises(ValueError, match="causal_safe must be False for a normalisation that "
                                       "normalises over the queries"):
    registry.register(registry.Normalization("bad_causal_plugin", weights, causal_safe=True,
                                             normalizes_over_queries=True))
  with pytest.raises(ValueError, match="causal_safe must be True or False"):
    registry.register(registry.Normalization("bad_causal_plugin", weights, causal_safe=1))


def test_the_decode_refusal_no_longer_recommends_the_leaking_causal_pass():
  with pytest.raises(ValueError) as refused:
    check_decodable("dnas")
  message = str(refused.value)
  assert "with a causal mask instead" not in message
  assert "Decode with a causal-safe normalisation (softmax" in message
