"""MultiHeadAttention as a drop-in for flax.linen's: each of flax's fields and call arguments
(decode, inputs_kv, normalize_qk, force_fp32_for_softmax, the dot_general and einsum fields)
gives flax's outputs from flax's parameters with normalization="softmax", and decoding with any
normalisation whose rows depend on their own query alone equals the causal pass."""
import dataclasses
import inspect

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax import MultiHeadAttention
from normattn_jax.attention import BUILTIN_NORMALIZATIONS, registry

B, N, F, H = 2, 5, 8, 2  # batch, positions, features, heads: head_dim 4
KEY = jax.random.key(0)
X = jax.random.normal(jax.random.key(1), (B, N, F))
Y = jax.random.normal(jax.random.key(2), (B, 3, F))
DECODABLE = [name for name in BUILTIN_NORMALIZATIONS
             if not registry.get(name).normalizes_over_queries]
OVER_QUERIES = [name for name in BUILTIN_NORMALIZATIONS if name not in DECODABLE]


def shapes(tree):
  return jax.tree.map(lambda a: a.shape, tree)


def perturbed(params, seed=7):
  """Every leaf moved randomly, so that norm scales and per-head parameters leave their inits."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [leaf + 0.3 * jax.random.normal(k, leaf.shape, leaf.dtype)
                                   for leaf, k in zip(leaves, keys)])


def decode_steps(layer, variables, x, **kwargs):
  """flax's decoding loop: one position per call, the cache carried from call to call; the step
  jitted, one program for every position (the masks traced, the flags static)."""
  masks = {k: v for k, v in kwargs.items() if isinstance(v, jax.Array)}
  flags = {k: v for k, v in kwargs.items() if k not in masks}

  @jax.jit
  def step(params, cache, x, masks):
    return layer.apply({"params": params, "cache": cache}, x, mutable=["cache"], **masks,
                       **flags)

  cache, outs = variables["cache"], []
  for i in range(x.shape[-2]):
    at_i = {k: v[:, i:i + 1] if k == "query_mask" else v for k, v in masks.items()}
    out, mutated = step(variables["params"], cache, x[:, i:i + 1], at_i)
    cache = mutated["cache"]
    outs.append(out)
  return jnp.concatenate(outs, axis=-2), cache


def test_the_fields_and_call_arguments_are_flax_s_in_flax_s_order():
  field_names = lambda cls: [f.name for f in dataclasses.fields(cls)
                             if f.name not in ("parent", "name")]
  theirs = field_names(nn.MultiHeadDotProductAttention)
  assert field_names(MultiHeadAttention)[:len(theirs)] == theirs
  arguments = lambda cls: [(p.name, p.kind, p.default)
                           for p in inspect.signature(cls.__call__).parameters.values()]
  ours = arguments(MultiHeadAttention)
  assert [a for a in ours if a[0] in dict((b[0], b) for b in arguments(
      nn.MultiHeadDotProductAttention))] == arguments(nn.MultiHeadDotProductAttention)


def test_decode_gives_flax_s_outputs_cache_and_the_causal_pass():
  ours = MultiHeadAttention(num_heads=H, decode=True)
  theirs = nn.MultiHeadDotProductAttention(num_heads=H, decode=True)
  variables = theirs.init(KEY, X)
  # cached_key, cached_value, cache_index: the shapes alone, traced, nothing compiled
  assert shapes(jax.eval_shape(ours.init, KEY, X)) == shapes(variables)
  variables = {"params": perturbed(variables["params"]), "cache": variables["cache"]}
  got, cache = decode_steps(ours, variables, X)
  want, their_cache = decode_steps(theirs, variables, X)
  chex.assert_trees_all_close(got, want, atol=1e-5)
  chex.assert_trees_all_close(cache, their_cache, atol=1e-6)
  assert int(cache["cache_index"]) == N
  full = MultiHeadAttention(num_heads=H).apply({"params": variables["params"]}, X, causal=True)
  chex.assert_trees_all_close(got, full, atol=1e-5)
  assert not np.allclose(got, MultiHeadAttention(num_heads=H).apply(
      {"params": variables["params"]}, X), atol=1e-3)  # the causal pass is not the full one


@pytest.mark.parametrize("implementation", ["quadratic", "fast"])
@pytest.mark.parametrize("name", DECODABLE)
# both paths' caches: softmax's; a per-head parameter: the sink's, the count of keys written:
# Scalable-Softmax's, the stick broken from the last key written: stick-breaking's fast path
@pytest.mark.fast_subset(lambda p: p["name"] == "softmax" or (p["name"], p["implementation"]) in (
    ("sink", "quadratic"), ("ssmax", "quadratic"), ("stickbreaking", "fast")))
def test_decoding_a_row_local_normalisation_equals_its_causal_pass(name, implementation):
  """Sigmoid's -log(n) and Scalable-Softmax's log(n) count the keys written so far, as the causal
  pass counts the keys up to the query; the fast paths take the cache as a key mask."""
  if implementation == "fast" and registry.get(name).fast is None:
    pytest.skip(f"{name} has no fast path")
  decoder = MultiHeadAttention(num_heads=H, normalization=name, decode=True,
                               implementation=implementation, block_size=2)
  variables = decoder.init(KEY, X)
  variables = {"params": perturbed(variables["params"]), "cache": variables["cache"]}
  got, _ = decode_steps(decoder, variables, X)
  full = MultiHeadAttention(num_heads=H, normalization=name, implementation="quadratic")
  want = full.apply({"params": variables["params"]}, X, causal=True)
  chex.assert_trees_all_close(got, want, atol=1e-5)


def test_decoding_with_the_module_options_and_masks_equals_the_causal_pass():
  """Differential attention's two maps, QK-norm and the output gate, with a key mask over the
  cache's positions, a query mask and causal=True (harmless: one query continues the cache)."""
  kwargs = dict(num_heads=H, normalization="ssmax", differential=True, qk_norm="rms",
                output_gate="elementwise")
  decoder = MultiHeadAttention(decode=True, **kwargs)
  variables = decoder.init(KEY, X)
  variables = {"params": perturbed(variables["params"]), "cache": variables["cache"]}
  key_mask = jnp.array([[True, False, True, True, False], [True, True, False, True, True]])
  query_mask = jnp.array([[True] * N, [True, True, True, False, True]])
  got, _ = decode_steps(decoder, variables, X, key_mask=key_mask, query_mask=query_mask,
                        causal=True)
  want = MultiHeadAttention(**kwargs).apply({"params": variables["params"]}, X, causal=True,
                                            key_mask=key_mask, query_mask=query_mask)
  chex.assert_trees_all_close(got, want, atol=1e-5)


@pytest.mark.parametrize("name", OVER_QUERIES)
def test_decode_is_refused_for_normalisations_over_the_queries(name):
  with pytest.raises(ValueError, match=f"decode=True .*'{name}'.*over the queries"):
    MultiHeadAttention(num_heads=H, normalization=name, decode=True)


def test_decode_steps_refuse_what_they_cannot_take():
  decoder = MultiHeadAttention(num_heads=H, decode=True)
  variables = decoder.init(KEY, X)
  step = lambda x, **kw: decoder.apply(variables, x, mutable=["cache"], **kw)
  with pytest.raises(ValueError, match=r"cache shape error.*\(2, 1, 2, 4\).*\(2, 2, 2, 4\)"):
    step(X[:, :2])
  with pytest.raises(ValueError, match="padding_mask .*decode step.*key_mask"):
    step(X[:, :1], padding_mask=jnp.ones((B, 1), bool))


def test_inputs_kv_is_flax_s_deprecated_alias():
  ours, theirs = MultiHeadAttention(num_heads=H), nn.MultiHeadDotProductAttention(num_heads=H)
  params = perturbed(theirs.init(KEY, X, Y))
  with pytest.warns(DeprecationWarning, match="inputs_kv"):
    got = ours.apply(params, X, inputs_kv=Y)
  with pytest.warns(DeprecationWarning):
    want = theirs.apply(params, X, inputs_kv=Y)
  chex.assert_trees_all_close(got, want, atol=1e-5)
  chex.assert_trees_all_close(got, ours.apply(params, X, Y, Y), atol=1e-6)
  with pytest.raises(ValueError) as err:
    ours.apply(params, X, Y, inputs_kv=Y)
  with pytest.raises(ValueError) as flax_err:
    theirs.apply(params, X, Y, inputs_kv=Y)
  assert str(err.value) == str(flax_err.value)
  with pytest.warns(DeprecationWarning) as ours_warned:
    ours.apply(params, X, inputs_kv=Y)
  with pytest.warns(DeprecationWarning) as flax_warned:
    theirs.apply(params, X, inputs_kv=Y)
  assert [str(w.message) for w in ours_warned] == [str(w.message) for w in flax_warned]
  with pytest.raises(ValueError, match="`inputs_k` cannot be None if `inputs_v` is not None"):
    ours.apply(params, X, inputs_v=Y)


def test_normalize_qk_is_flax_s_layernorm_with_its_parameter_names():
  ours = MultiHeadAttention(num_heads=H, normalize_qk=True)
  theirs = nn.MultiHeadDotProductAttention(num_heads=H, normalize_qk=True)
  params = theirs.init(KEY, X, Y)
  # query_ln, key_ln: a scale each (the shapes alone: traced, nothing compiled)
  assert shapes(jax.eval_shape(ours.init, KEY, X, Y)) == shapes(params)
  params = perturbed(params)
  chex.assert_trees_all_close(ours.apply(params, X, Y), theirs.apply(params, X, Y), atol=1e-5)
  plain = {"params": {k: v for k, v in params["params"].items() if not k.endswith("_ln")}}
  assert not np.allclose(ours.apply(params, X, Y),
                         MultiHeadAttention(num_heads=H).apply(plain, X, Y), atol=1e-3)
  with pytest.raises(ValueError, match="normalize_qk=True .*qk_norm='rms'"):
    MultiHeadAttention(num_heads=H, normalize_qk=True, qk_norm="rms")


def test_force_fp32_for_softmax_gives_flax_s_weights_and_outputs_in_bf16():
  bf16 = X.astype(jnp.bfloat16)
  for kwargs in ({"dtype": jnp.bfloat16}, {"param_dtype": jnp.bfloat16}):
    kwargs = dict(num_heads=H, force_fp32_for_softmax=True, **kwargs)
    ours, theirs = MultiHeadAttention(**kwargs), nn.MultiHeadDotProductAttention(**kwargs)
    params = theirs.init(KEY, bf16)
    sow = lambda layer: layer.apply(params, bf16, sow_weights=True, mutable=["intermediates"])
    (got, got_sown), (want, want_sown) = sow(ours), sow(theirs)
    assert got.dtype == want.dtype  # float32 heads: float32 out with bf16 params, dtype None
    (got_w,), (want_w,) = (s["intermediates"]["attention_weights"] for s in (got_sown, want_sown))
    assert got_w.dtype == want_w.dtype == jnp.float32
    chex.assert_trees_all_close(got_w, want_w, atol=1e-6)
    chex.assert_trees_all_close(got.astype(jnp.float32), want.astype(jnp.float32), atol=2e-2)


# the module casts the logits before any normalisation: a row-local softmax, HNAS (over the
# queries, with its own parameter), NAP (its unscaled logits); every normalisation keeps its
# logits' dtype: test_the_weights_keep_the_logits_dtype_whatever_the_params_dtype
@pytest.mark.parametrize("name", BUILTIN_NORMALIZATIONS)
@pytest.mark.fast_subset(lambda p: p["name"] in ("softmax", "hnas", "nap"))
def test_force_fp32_for_softmax_keeps_every_normalisation_s_weights_in_float32(name):
  """The weights from the same bf16 logits, not rounded to bf16 (which the default does)."""
  bf16 = X.astype(jnp.bfloat16)
  weights = {}
  for force in (False, True):
    layer = MultiHeadAttention(num_heads=H, normalization=name, dtype=jnp.bfloat16,
                               force_fp32_for_softmax=force)
    params = layer.init(KEY, bf16)
    _, sown = layer.apply(params, bf16, sow_weights=True, mutable=["intermediates"])
    weights[force] = sown["intermediates"]["attention_weights"][0]
  assert weights[False].dtype == jnp.bfloat16 and weights[True].dtype == jnp.float32
  rounded = weights[True].astype(jnp.bfloat16)
  np.testing.assert_allclose(weights[False].astype(jnp.float32), rounded.astype(jnp.float32),
                             atol=1e-2)
  assert not np.array_equal(weights[True], rounded.astype(jnp.float32))


@pytest.mark.parametrize("name", BUILTIN_NORMALIZATIONS)
def test_the_weights_keep_the_logits_dtype_whatever_the_params_dtype(name):
  """float32 per-head parameters (sigmoid's bias) do not promote bf16 logits."""
  norm = registry.get(name)
  logits = jax.ShapeDtypeStruct((B, H, N, N), jnp.bfloat16)  # the dtype alone: traced, not run
  weights = jax.eval_shape(lambda l: norm.attention_weights(l, None, norm.initial_params(H)),
                           logits)
  assert weights.dtype == jnp.bfloat16


@pytest.mark.parametrize("name", ["sigmoid", "nap"])
def test_force_fp32_for_softmax_gives_float32_heads_on_the_fast_path(name):
  bf16 = X.astype(jnp.bfloat16)
  out = {}
  for force in (False, True):
    layer = MultiHeadAttention(num_heads=H, normalization=name, param_dtype=jnp.bfloat16,
                               implementation="fast", force_fp32_for_softmax=force)
    out[force] = layer.apply(layer.init(KEY, bf16), bf16)
  assert out[False].dtype == jnp.bfloat16 and out[True].dtype == jnp.float32
  np.testing.assert_allclose(out[True], out[False].astype(jnp.float32), atol=5e-2)


def doubled(*args, **kwargs):
  return 2.0 * jax.lax.dot_general(*args, **kwargs)


def halved(*args, **kwargs):
  return 0.5 * jax.lax.dot_general(*args, **kwargs)


class Doubled:
  """A dot_general factory, as flax's ``*_dot_general_cls`` fields take."""

  def __call__(self, *args, **kwargs):
    return doubled(*args, **kwargs)


class Halved:

  def __call__(self, *args, **kwargs):
    return halved(*args, **kwargs)


@pytest.mark.parametrize("fields", [dict(qkv_dot_general=doubled, out_dot_general=halved),
                                    dict(qkv_dot_general_cls=Doubled, out_dot_general_cls=Halved)])
def test_the_dot_generals_reach_the_projections_as_in_flax(fields):
  ours = MultiHeadAttention(num_heads=H, **fields)
  theirs = nn.MultiHeadDotProductAttention(num_heads=H, **fields)
  params = perturbed(theirs.init(KEY, X, Y))
  got = ours.apply(params, X, Y)
  chex.assert_trees_all_close(got, theirs.apply(params, X, Y), atol=1e-5)
  assert not np.allclose(got, MultiHeadAttention(num_heads=H).apply(params, X, Y), atol=1e-3)


class ScaledEinsum:
  """An einsum factory (flax's ``*_einsum_cls``): jnp.einsum times a constant."""
  factor = 1.0

  def __call__(self, subscripts, *operands):
    return self.factor * jnp.einsum(subscripts, *operands)


class HalfEinsum(ScaledEinsum):
  factor = 0.5


class TripleEinsum(ScaledEinsum):
  factor = 3.0


def test_the_einsum_classes_compute_the_logits_and_the_weighted_sum_as_in_flax():
  fields = dict(qk_attn_weights_einsum_cls=HalfEinsum, attn_weights_value_einsum_cls=TripleEinsum)
  ours = MultiHeadAttention(num_heads=H, **fields)
  theirs = nn.MultiHeadDotProductAttention(num_heads=H, **fields)
  params = perturbed(theirs.init(KEY, X, Y))
  got = ours.apply(params, X, Y)
  chex.assert_trees_all_close(got, theirs.apply(params, X, Y), atol=1e-5)
  assert not np.allclose(got, MultiHeadAttention(num_heads=H).apply(params, X, Y), atol=1e-3)
  with pytest.raises(ValueError, match="must be set together"):
    MultiHeadAttention(num_heads=H, qk_attn_weights_einsum_cls=HalfEinsum)
  with pytest.raises(ValueError, match="precision=.*einsum classes"):
    MultiHeadAttention(num_heads=H, precision="highest", **fields)
  fast = MultiHeadAttention(num_heads=H, normalization="nap", implementation="fast", **fields)
  with pytest.raises(ValueError, match="cannot take the einsum classes"):
    fast.init(KEY, X)


def test_a_custom_attention_fn_is_refused_and_flax_s_default_accepted():
  MultiHeadAttention(num_heads=H, attention_fn=nn.dot_product_attention)
  with pytest.raises(ValueError, match="attention_fn=.*normalization="):
    MultiHeadAttention(num_heads=H, attention_fn=lambda q, k, v, **kw: v)


@pytest.mark.parametrize("field", ["decode", "normalize_qk", "force_fp32_for_softmax"])
def test_flags_that_are_not_bools_are_refused_naming_the_field(field):
  with pytest.raises(ValueError, match=f"{field} must be True or False, got 'yes'"):
    MultiHeadAttention(num_heads=H, **{field: "yes"})


def test_flax_s_float_masks_are_taken_as_flax_takes_them():
  """nn.make_causal_mask and nn.make_attention_mask give float32 0/1 masks: the same outputs as
  the boolean masks and as flax's module; a mask of other values is refused, naming them."""
  ours, theirs = MultiHeadAttention(num_heads=H), nn.MultiHeadDotProductAttention(num_heads=H)
  params = perturbed(theirs.init(KEY, X))
  tokens = jnp.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 0]])
  for mask in (nn.make_causal_mask(tokens),
               nn.make_attention_mask(tokens > 0, tokens > 0),
               nn.combine_masks(nn.make_causal_mask(tokens),
                                nn.make_attention_mask(tokens > 0, tokens > 0))):
    assert mask.dtype == jnp.float32
    got = ours.apply(params, X, mask=mask)
    chex.assert_trees_all_close(got, ours.apply(params, X, mask=mask.astype(bool)), atol=0)
    seen = np.asarray(mask.any(axis=(-3, -1)))  # a row without a key is 0 here, flax's uniform
    np.testing.assert_allclose(got[seen], theirs.apply(params, X, mask=mask)[seen], atol=1e-5)
    jitted = jax.jit(lambda m: ours.apply(params, X, mask=m))(mask)  # traced: nonzero attends
    chex.assert_trees_all_close(jitted, got, atol=1e-6)
  with pytest.raises(ValueError, match=r"mask must be boolean or flax's 0/1 mask .* float32 "
                                       r"mask with the values \[0.0, 0.5, 1.0\]"):
    ours.apply(params, X, mask=jnp.array([0.0, 0.5, 1.0, 1.0, 1.0]))


def test_flax_s_autoregressive_receptive_field_with_its_float_causal_mask():
  """flax's check of a causal layer: the output at position i depends on the inputs at j <= i
  only, with the mask nn.make_causal_mask gives."""
  layer = MultiHeadAttention(num_heads=H)
  x = jax.random.normal(KEY, (1, N, F))
  params = layer.init(KEY, X)  # the parameters of any batch: the programs of the other tests
  mask = nn.make_causal_mask(jnp.ones((1, N)))
  jacobian = jax.jit(jax.jacrev(lambda x: layer.apply(params, x, mask=mask)))(x)[0, :, :, 0, :, :]
  depends = np.abs(np.asarray(jacobian)).sum(axis=(1, 3)) > 0  # [out position, in position]
  np.testing.assert_array_equal(depends, np.tril(np.ones((N, N), bool)))


def test_a_decode_step_past_the_cache_is_refused_or_poisoned_under_jit():
  """flax's modules write the last slot again; ours refuse the step (eagerly, with the numbers)
  and, where the index is traced, return NaN outputs rather than a wrong sequence's."""
  layer = MultiHeadAttention(num_heads=H, decode=True)
  x = X[:, :4]
  variables = layer.init(KEY, x)
  _, cache = decode_steps(layer, variables, x)
  with pytest.raises(ValueError, match="decode step 5 does not fit the cache of max_length 4"):
    layer.apply({"params": variables["params"], "cache": cache}, x[:, :1], mutable=["cache"])
  step = jax.jit(lambda c, x: layer.apply({"params": variables["params"], "cache": c}, x,
                                          mutable=["cache"]))
  out, _ = step(cache, x[:, :1])
  assert jnp.isnan(out).all()
  fitting, _ = step(variables["cache"], x[:, :1])
  assert jnp.isfinite(fitting).all()


def test_an_nnx_decode_step_past_the_cache_is_refused_or_poisoned_under_jit():
  from flax import nnx

  from normattn_jax import nnx as ours_nnx

  layer = ours_nnx.MultiHeadAttention(num_heads=H, in_features=F, decode=True,
                                      rngs=nnx.Rngs(0))
  layer.init_cache((B, 4, F))
  step = nnx.jit(lambda layer, x: layer(x))
  for i in range(4):
    assert jnp.isfinite(step(layer, X[:, i:i + 1])).all()
  assert jnp.isnan(step(layer, X[:, :1])).all()
  with pytest.raises(ValueError, match="decode step 6 does not fit the cache of max_length 4"):
    layer(X[:, :1])


def test_a_mask_passed_as_inputs_v_warns_in_flax_s_words():
  ours, theirs = MultiHeadAttention(num_heads=1), nn.MultiHeadDotProductAttention(num_heads=1)
  x = jax.random.normal(KEY, (1, 4, 1))
  params = theirs.init(KEY, x, x)
  mask = nn.make_causal_mask(jnp.ones((1, 4)))
  with pytest.warns(DeprecationWarning) as ours_warned:
    with pytest.raises(Exception):
      ours.apply(params, x, x, mask)
  with pytest.warns(DeprecationWarning) as flax_warned:
    with pytest.raises(Exception):
      theirs.apply(params, x, x, mask)
  said = [str(w.message) for w in ours_warned if "function signature" in str(w.message)]
  assert said and said == [str(w.message) for w in flax_warned
                           if "function signature" in str(w.message)]
