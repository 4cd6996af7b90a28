"""MultiHeadAttention: drop-in for flax's attention, extra parameters, errors."""
import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax import AttentionSpec, MultiHeadAttention
from normattn_jax.attention import BUILTIN_NORMALIZATIONS, dnas_weights, softmax_weights

KEY = jax.random.key(0)
X = jax.random.normal(jax.random.key(1), (2, 7, 16))
Y = jax.random.normal(jax.random.key(2), (2, 5, 16))
MASK = jax.random.bernoulli(jax.random.key(3), 0.8, (2, 1, 7, 5)).at[..., 0].set(True)


def shapes(tree):
  return jax.tree.map(lambda a: a.shape, tree)


@pytest.mark.parametrize("kwargs", [{}, {"qkv_features": 8, "out_features": 12},
                                    {"use_bias": False}])
def test_softmax_is_a_drop_in_for_flax(kwargs):
  ours = MultiHeadAttention(num_heads=4, **kwargs)
  theirs = nn.MultiHeadDotProductAttention(num_heads=4, **kwargs)
  params_ours = ours.init(KEY, X, Y)
  params_theirs = theirs.init(KEY, X, Y)
  assert shapes(params_ours) == shapes(params_theirs)
  chex.assert_trees_all_close(params_ours, params_theirs)  # same initialisers, same names
  other = theirs.init(jax.random.key(9), X, Y)
  for mask in (None, MASK):
    chex.assert_trees_all_close(ours.apply(other, X, Y, mask=mask),
                                theirs.apply(other, X, Y, mask=mask), atol=1e-5)
  chex.assert_trees_all_close(ours.apply(other, X), theirs.apply(other, X), atol=1e-5)


def test_dropout_matches_flax():
  kwargs = dict(num_heads=2, dropout_rate=0.3, deterministic=False)
  ours, theirs = MultiHeadAttention(**kwargs), nn.MultiHeadDotProductAttention(**kwargs)
  params = theirs.init({"params": KEY, "dropout": KEY}, X)
  rngs = {"dropout": jax.random.key(5)}
  chex.assert_trees_all_close(ours.apply(params, X, rngs=rngs), theirs.apply(params, X, rngs=rngs),
                              atol=1e-5)
  deterministic = MultiHeadAttention(num_heads=2, dropout_rate=0.3).apply(params, X,
                                                                        deterministic=True)
  assert not np.allclose(ours.apply(params, X, rngs=rngs), deterministic)


# make test's one pass of every normalisation through the module (its parameters built by it)
@pytest.mark.parametrize("normalization", BUILTIN_NORMALIZATIONS)
def test_every_normalization_runs(normalization):
  # a causal mask's zeros, for every normalisation (DNAS's leak accepted: test_causality.py)
  layer = MultiHeadAttention(num_heads=2, normalization=normalization, allow_future_leak=True)
  params = layer.init(KEY, X)
  mask = jnp.tril(jnp.ones((7, 7), bool))
  out, state = layer.apply(params, X, mask=mask, sow_weights=True, mutable=["intermediates"])
  assert out.shape == X.shape and jnp.isfinite(out).all()
  (w,) = state["intermediates"]["attention_weights"]
  assert w.shape == (2, 2, 7, 7)
  assert (w[..., ~mask] == 0).all()


def test_extra_parameters():
  hnas = MultiHeadAttention(num_heads=4, normalization=AttentionSpec("hnas", {"hybrid_init": 0.25}))
  hnas = jax.jit(hnas.init)(KEY, X)  # one program, not one per op
  np.testing.assert_array_equal(hnas["params"]["hybrid_weight"], [0.25] * 4)
  nap = jax.jit(MultiHeadAttention(num_heads=4, normalization="nap").init)(KEY, X)
  np.testing.assert_array_equal(nap["params"]["nap_gain"], np.ones(4))
  np.testing.assert_array_equal(nap["params"]["nap_bias"], np.zeros(4))


def test_hybrid_weight_is_kept_in_unit_interval_and_trainable():
  layer = MultiHeadAttention(num_heads=2, normalization="hnas")
  params = jax.jit(layer.init)(KEY, X)  # each step one program, not op by op
  params["params"]["hybrid_weight"] = jnp.array([1.7, -0.4])
  _, state = jax.jit(lambda p: layer.apply(p, X, sow_weights=True, mutable=["intermediates"]))(
      params)
  (w,) = state["intermediates"]["attention_weights"]
  q = (jnp.einsum("...d,dhk->...hk", X, params["params"]["query"]["kernel"])
       + params["params"]["query"]["bias"])
  k = (jnp.einsum("...d,dhk->...hk", X, params["params"]["key"]["kernel"])
       + params["params"]["key"]["bias"])
  logits = jnp.einsum("bqhd,bkhd->bhqk", q / jnp.sqrt(8.0), k)
  chex.assert_trees_all_close(w[:, 0], dnas_weights(logits)[:, 0], atol=1e-5)  # u clipped to 1
  chex.assert_trees_all_close(w[:, 1], softmax_weights(logits)[:, 1], atol=1e-5)  # u clipped to 0
  grad = jax.jit(jax.grad(lambda p: jnp.sum(layer.apply(p, X) ** 2)))(params)
  assert (grad["params"]["hybrid_weight"] != 0).all()  # it can move back into [0, 1]


def test_hybrid_weight_from_the_caller_replaces_the_parameter():
  own = MultiHeadAttention(num_heads=4, normalization=AttentionSpec("hnas", {"hybrid_init": 0.3}))
  params = own.init(KEY, X)["params"]
  u = jnp.array([0.3, 0.3, 0.3, 0.3])
  shared = {k: v for k, v in params.items() if k != "hybrid_weight"}
  supplied = own.apply({"params": shared}, X, head_params={"hybrid_weight": u})
  chex.assert_trees_all_close(supplied, own.apply({"params": params}, X), atol=1e-6)
  other = own.apply({"params": shared}, X,
                    head_params={"hybrid_weight": jnp.array([1.0, 0.0, 1.0, 0.0])})
  assert not np.allclose(other, supplied)
  with pytest.raises(ValueError, match="hybrid_weight must have shape"):
    own.apply({"params": shared}, X, head_params={"hybrid_weight": jnp.ones(3)})
  with pytest.raises(ValueError, match="hybrid_weight is not a per-head parameter"):
    MultiHeadAttention(num_heads=4).init(KEY, X, head_params={"hybrid_weight": u})


@pytest.mark.parametrize("normalization", ["nap", "softmax", "non"])
def test_nap_logits_are_not_scaled_but_others_are(normalization):
  """The sown weights equal the normalisation of q.k, divided by sqrt(head_dim) except for NAP
  (its own normalisation of the logits replaces the scaling)."""
  from normattn_jax.attention import registry
  layer = MultiHeadAttention(num_heads=2, normalization=normalization, implementation="quadratic")
  params = layer.init(KEY, X)
  params = jax.tree.map(lambda w: 0.05 * w, params)  # small logits: NAP's eps tells scales apart
  _, sown = layer.apply(params, X, sow_weights=True, mutable=["intermediates"])
  weights = sown["intermediates"]["attention_weights"][0]
  p = params["params"]
  q = jnp.einsum("...nf,fhd->...hnd", X, p["query"]["kernel"]) + p["query"]["bias"][:, None]
  k = jnp.einsum("...nf,fhd->...hnd", X, p["key"]["kernel"]) + p["key"]["bias"][:, None]
  logits = jnp.einsum("...hqd,...hkd->...hqk", q, k)
  norm = registry.get(normalization)
  head = {name: v for name, v in p.items() if name not in ("query", "key", "value", "out")}
  of = lambda l: norm.attention_weights(l, None, head, layer._options())
  scaled, unscaled = of(logits / np.sqrt(8)), of(logits)
  want, other = (unscaled, scaled) if normalization == "nap" else (scaled, unscaled)
  np.testing.assert_allclose(weights, want, atol=1e-6)
  assert not np.allclose(weights, other, atol=1e-4)


def test_head_norm_and_activation_apply_over_concatenated_heads():
  layer = MultiHeadAttention(num_heads=4, head_norm=True, head_activation=jax.nn.gelu)
  params = jax.eval_shape(layer.init, KEY, X)  # the shapes alone: traced, nothing compiled
  assert shapes(params["params"]["head_norm"]) == {"scale": (16,), "bias": (16,)}


def test_vmap_over_init_and_apply_and_jit():
  layer = MultiHeadAttention(num_heads=2, normalization="dnas")
  keys = jax.random.split(KEY, 3)
  stacked = jax.jit(jax.vmap(lambda k: layer.init(k, X)))(keys)
  assert stacked["params"]["query"]["kernel"].shape == (3, 16, 2, 8)
  outs = jax.jit(jax.vmap(lambda p: layer.apply(p, X)))(stacked)
  apply = jax.jit(lambda p: layer.apply(p, X))  # one program for the three, not op by op
  for i in range(3):
    single = jax.tree.map(lambda a: np.asarray(a)[i], stacked)
    chex.assert_trees_all_close(outs[i], apply(single), atol=1e-5)


def test_bad_arguments_name_the_field():
  with pytest.raises(ValueError, match="normalization"):
    MultiHeadAttention(num_heads=2, normalization="not_registered")  # tests register sparsemax
  with pytest.raises(ValueError, match=r"'hnas': option hybrid_init must lie in \[0, 1\], got 1.5"):
    MultiHeadAttention(num_heads=2, normalization=AttentionSpec("hnas", {"hybrid_init": 1.5}))
  with pytest.raises(ValueError, match="sinkhorn_iters must be a positive integer, got 0"):
    MultiHeadAttention(num_heads=2, normalization=AttentionSpec("sinkhorn", {"sinkhorn_iters": 0}))
  with pytest.raises(ValueError, match="'softmax' has no option 'sinkhorn_iters'"):
    MultiHeadAttention(num_heads=2, normalization=AttentionSpec("softmax", {"sinkhorn_iters": 2}))
  with pytest.raises(ValueError, match="num_heads"):
    MultiHeadAttention(num_heads=3, qkv_features=16)
  with pytest.raises(ValueError, match="num_heads"):
    MultiHeadAttention(num_heads=3).init(KEY, X)
  with pytest.raises(ValueError, match="dropout_rate"):
    MultiHeadAttention(num_heads=2, dropout_rate=1.0)


# the module's alignment is one for all; DNAS's fast path with unequal lengths:
# test_fast.py::test_causal_with_unequal_lengths_equals_the_quadratic_path[*-hnas]
@pytest.mark.parametrize("normalization", ["nap", "dnas"])
@pytest.mark.fast_subset(lambda p: p["normalization"] == "nap")
def test_causal_with_unequal_lengths_is_the_same_on_both_paths(normalization):
  """``causal`` aligns the sequences at their ends on both paths (query i sees the keys
  j <= i + k - q), so ``implementation="auto"`` gives one answer whichever path it picks."""
  quad = MultiHeadAttention(num_heads=2, normalization=normalization, implementation="quadratic",
                            allow_future_leak=True)  # DNAS's paths compared, leak and all
  quick = MultiHeadAttention(num_heads=2, normalization=normalization, implementation="fast",
                             block_size=4, allow_future_leak=True)
  causal = lambda layer: jax.jit(lambda *a: layer.apply(params, *a, causal=True))
  params = jax.jit(quad.init)(KEY, X, Y)  # one program, not one per op
  for queries, keys in ((Y, X), (X, Y)):
    want = np.asarray(causal(quad)(queries, keys))
    chex.assert_trees_all_close(causal(quick)(queries, keys), want, atol=1e-4)
  assert (want[:, :2] == 0).all()  # 7 queries, 5 keys: the first two see no key (zero out bias)
  if normalization == "nap":  # auto takes the fast path from 8 * head_dim = 64 keys
    long = jax.random.normal(jax.random.key(4), (2, 64, 16))
    auto = MultiHeadAttention(num_heads=2, normalization="nap")
    chex.assert_trees_all_close(causal(auto)(Y, long), causal(quad)(Y, long), atol=1e-4)


@pytest.mark.parametrize("implementation", ["quadratic", "fast"])
def test_empty_sequences_name_the_shape(implementation):
  layer = MultiHeadAttention(num_heads=2, normalization="nap", implementation=implementation)
  empty = jnp.zeros((2, 0, 16))
  shape = r"shape \(2, 2, (0, \d+|\d+, 0)\)"  # [batch, heads, q or k, k or d]
  with pytest.raises(ValueError, match=shape):
    layer.init(KEY, empty, X)
  with pytest.raises(ValueError, match=shape):
    layer.init(KEY, X, empty)
