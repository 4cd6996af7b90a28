"""Appending padding never changes the real positions: outputs and gradients, for every model,
normalisation and attention path.

The attention is made sharp first (query and key kernels scaled up): near-uniform weights at
initialisation make a padded query's share of DNAS's column normalisation almost constant, which
would hide exactly the leak these tests are for.
"""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.attention.module import MultiHeadAttention
from normattn_jax.attention.module_spec import AttentionModuleSpec
from normattn_jax.attention import BUILTIN_NORMALIZATIONS as NORMALIZATIONS
from normattn_jax.attention import get
from normattn_jax.blocks import ARCHITECTURES
from normattn_jax.models.albert import AlbertConfig, AlbertModel
from normattn_jax.models.bert import BertConfig, BertModel
from normattn_jax.models.sequence import SequenceModel

N, PAD, D, H, VOCAB = 8, 4, 16, 4, 20
IMPLEMENTATIONS = ("quadratic", "fast", "fused")
SHARPEN = 20.0
# The checks run in milliseconds; XLA's optimisation passes would take seconds per program.
QUICK = dict(compiler_options={"xla_backend_optimization_level": 0,
                               "xla_llvm_disable_expensive_passes": True})


def has_path(normalization, implementation):
  """Whether the normalisation has the implementation's path (every one has "quadratic")."""
  return implementation == "quadratic" or getattr(get(normalization), implementation) is not None


def sharpen(params, factor=SHARPEN, kernels=("query", "key")):
  """The params with the kernels of the modules named ``kernels`` multiplied by ``factor``."""
  def scale(path, x):
    names = [getattr(k, "key", None) for k in path]
    return x * factor if names[-1] == "kernel" and names[-2] in kernels else x
  return jax.tree_util.tree_map_with_path(scale, params)


def init(model, key, tokens):
  return jax.jit(model.init, **QUICK)(key, tokens)  # eager init dispatches op by op: slower


def inputs(seed=0):
  """Real tokens ``[2, N]``, the same with PAD random (not pad-id) tokens appended, the mask."""
  rng = np.random.default_rng(seed)
  real = rng.integers(1, VOCAB, (2, N)).astype(np.int32)
  padded = np.concatenate([real, rng.integers(1, VOCAB, (2, PAD)).astype(np.int32)], axis=1)
  mask = np.broadcast_to(np.arange(N + PAD) < N, padded.shape)
  return jnp.asarray(real), jnp.asarray(padded), jnp.asarray(mask)


def check_padding_invariance(apply, params, seed=0):
  """``apply(params, tokens, mask) -> [2, n, ...]``: the real positions' outputs and the
  gradient of a loss on them agree with and without the padding."""
  real, padded, mask = inputs(seed)

  def loss(p, tokens, m):
    out = apply(p, tokens, m)[:, :N]
    w = jax.random.normal(jax.random.key(seed), out.shape, out.dtype)
    return jnp.sum(w * out), out

  grad = jax.value_and_grad(loss, has_aux=True)
  both = jax.jit(lambda p: (grad(p, real, None), grad(p, padded, mask)), **QUICK)
  ((_, plain), plain_grad), ((_, padded_out), padded_grad) = both(params)
  assert_close(padded_out, plain, "outputs")
  for (path, got), want in zip(jax.tree_util.tree_leaves_with_path(padded_grad),
                               jax.tree_util.tree_leaves(plain_grad)):
    assert_close(got, want, "gradient " + jax.tree_util.keystr(path))


def assert_close(got, want, what, tol=1e-4):
  """Equal to ``tol`` of the largest magnitude: sharp attention amplifies float rounding."""
  got, want = np.asarray(got), np.asarray(want)
  error = float(np.max(np.abs(got - want), initial=0.0))
  assert error <= tol * (1.0 + float(np.max(np.abs(want), initial=0.0))),(
      f"{what} differ by {error:.3g} (largest magnitude {np.max(np.abs(want), initial=0.0):.3g})")


# Every normalisation on the post-LN layout, the presets of the other attention archs, and a
# column-normalising one on the MTE layout (whose head LayerNorm sees the padded rows' zeros).
SEQUENCE_CASES = ([("bert", norm) for norm in NORMALIZATIONS]
                  + [("mte", None), ("mte", "dnas"), ("nap", None), ("non", None)])


def sequence_model(arch, normalization, implementation):
  return SequenceModel(vocab_size=VOCAB, max_len=N + PAD, d_model=D, num_layers=1, num_heads=H,
                       arch=arch, normalization=normalization, output="token_classes",
                       num_classes=3, init_std=0.3,  # 0.02 would leave near-zero activations
                       attention_module=AttentionModuleSpec(implementation=implementation))


@functools.lru_cache(maxsize=None)
def sharp_sequence_params(arch, normalization):
  """Shared by both implementations (same params)."""
  model = sequence_model(arch, normalization, "quadratic")
  return sharpen(init(model, jax.random.key(1), inputs()[1]))


@pytest.mark.parametrize("arch,normalization,implementation", [
    (arch, n, i) for arch, n in SEQUENCE_CASES for i in IMPLEMENTATIONS
    if has_path(n or ARCHITECTURES[arch].normalization, i)])
@pytest.mark.fast_subset(  # each path row-local (bert-softmax) and over the queries (mte-dnas,
    # MTE's layout); the sink's parameter on its kernel; NAP's and NON's layers on their fast path
    lambda p: (p["arch"], p["normalization"]) in (("bert", "softmax"), ("mte", "dnas"))
    or (p["arch"], p["normalization"], p["implementation"]) in (
        ("bert", "sink", "fused"), ("nap", None, "fast"), ("non", None, "fast")))
def test_sequence_model(arch, normalization, implementation):
  model = sequence_model(arch, normalization, implementation)
  check_padding_invariance(lambda p, t, m: model.apply(p, t, m),
                           sharp_sequence_params(arch, normalization))


@pytest.mark.parametrize("arch", ["sum", "max"])
def test_sequence_model_pooling(arch):
  model = sequence_model(arch, None, "auto")
  params = init(model, jax.random.key(1), inputs()[1])
  check_padding_invariance(lambda p, t, m: model.apply(p, t, m), params)


@functools.lru_cache(maxsize=None)
def sharp_albert_params(normalization):
  """ALBERT's 0.02 kernels leave the layers tiny inputs and a tiny attention output next to the
  residual: scale them to unit size (as in a trained model) before sharpening the attention."""
  params = init(albert(normalization, "quadratic"), jax.random.key(2), inputs()[1])
  params = sharpen(params, 30.0, ("embedding_projection",))
  return sharpen(sharpen(params, 10.0, ("value", "out")))


def albert(normalization, implementation):
  config = AlbertConfig(vocab_size=VOCAB, embedding_size=8, hidden_size=D, num_hidden_layers=2,
                        num_attention_heads=H, intermediate_size=24,
                        max_position_embeddings=N + PAD, attention=normalization,
                        attention_module=AttentionModuleSpec(implementation=implementation))
  return AlbertModel(config)


@pytest.mark.parametrize("normalization,implementation", [
    (n, i) for n in NORMALIZATIONS for i in IMPLEMENTATIONS if has_path(n, i)])
@pytest.mark.fast_subset(  # the paths' padding is test_sequence_model's; ALBERT's layers on one
    lambda p: (p["normalization"], p["implementation"]) == ("dnas", "quadratic"))
def test_albert_model(normalization, implementation):
  model = albert(normalization, implementation)
  params = sharp_albert_params(normalization)
  check_padding_invariance(
      lambda p, t, m: model.apply(p, t, m)["last_hidden_state"], params)


@functools.lru_cache(maxsize=None)
def bert_model():
  """Shared by the two tests that read it (same params)."""
  config = BertConfig(vocab_size=VOCAB, hidden_size=D, num_hidden_layers=2,
                      num_attention_heads=H, intermediate_size=24,
                      max_position_embeddings=N + PAD)
  model = BertModel(config, add_pooler=True)
  return model, sharpen(init(model, jax.random.key(3), inputs()[1]), 3.0)  # lecun: unit scale


def test_bert_model():
  model, params = bert_model()
  check_padding_invariance(lambda p, t, m: model.apply(
      p, t, None if m is None else m.astype(jnp.int32))["last_hidden_state"], params)


def mean_row_max(model, params, layer_path):
  _, padded, mask = inputs()
  apply = functools.partial(model.apply, sow_weights=True, mutable=["intermediates"])
  _, state = jax.jit(apply, **QUICK)(params, padded, mask)
  node = state["intermediates"]
  for name in layer_path:
    node = node[name]
  w = node["attention_weights"][0]  # [2, heads, n, n]
  return float(jnp.mean(jnp.max(w[:, :, :N], axis=-1)))


def test_sharpened_attention_is_far_from_uniform():
  """The tests above only bite if the weights are far from uniform (1 / N = 0.125)."""
  seq = sequence_model("bert", "softmax", "quadratic")
  params = sharp_sequence_params("bert", "softmax")
  assert mean_row_max(seq, params, ("block_0", "attention")) > 0.5
  alb = albert("softmax", "quadratic")
  params = sharp_albert_params("softmax")
  assert mean_row_max(alb, params, ("group_0_inner_0", "attention")) > 0.5
  bert, params = bert_model()
  assert mean_row_max(bert, params, ("layer_0", "attention")) > 0.5


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.fast_subset(  # the masks combine before the path is chosen; DNAS's padding on the
    lambda p: p["implementation"] == "quadratic")  # others: test_sequence_model[mte-dnas-*]
def test_padding_mask_masks_queries_and_keys(implementation):
  x = jax.random.normal(jax.random.key(4), (2, N + PAD, D))
  mask = inputs()[2]
  layer = MultiHeadAttention(num_heads=H, normalization="dnas", implementation=implementation)
  params = sharpen(init(layer, jax.random.key(5), x), 5.0)
  fewer = mask & (jnp.arange(N + PAD) != 2)

  @functools.partial(jax.jit, **QUICK)
  def outputs(params, x):
    apply = functools.partial(layer.apply, params, x)
    return (apply(padding_mask=mask), apply(x, padding_mask=mask),
            apply(query_mask=mask, key_mask=mask),
            apply(padding_mask=mask, key_mask=fewer),  # and-ed with the other masks
            apply(query_mask=mask, key_mask=fewer))

  padded, self_given, both, combined, combined_by_hand = outputs(params, x)
  chex.assert_trees_all_close(padded, both)
  chex.assert_trees_all_close(self_given, both)
  chex.assert_trees_all_close(combined, combined_by_hand)
  chex.assert_trees_all_close(jax.jit(layer.apply, **QUICK)(params, x[:, :N]), padded[:, :N],
                              atol=1e-5, rtol=1e-5)


def test_padding_mask_errors():
  x = jax.ShapeDtypeStruct((2, N, D), jnp.float32)
  layer = MultiHeadAttention(num_heads=H, normalization="dnas")
  params = jax.eval_shape(layer.init, jax.random.key(0), x)
  # refused while tracing: shapes are all it takes
  apply = lambda *a, **kw: jax.eval_shape(lambda p, a, kw: layer.apply(p, *a, **kw), params, a, kw)
  mask = jax.ShapeDtypeStruct((2, N), jnp.bool_)
  with pytest.raises(ValueError, match="cross-attention"):
    apply(x, x, padding_mask=mask)
  with pytest.raises(TypeError, match="padding_mask must be boolean"):
    apply(x, padding_mask=jax.ShapeDtypeStruct((2, N), jnp.int32))
  with pytest.raises(ValueError, match="padding_mask of shape"):
    apply(x, padding_mask=jax.ShapeDtypeStruct((2, N + 1), jnp.bool_))


# ----- NaN and inf in the padding (what a buffer of unwritten tokens may hold) -----

def with_garbage(x):
  """``x [2, N + PAD, D]`` with the padded positions of the first example NaN and +-inf."""
  garbage = jnp.where(jnp.arange(D) % 3 == 0, jnp.nan, jnp.where(jnp.arange(D) % 3 == 1,
                                                                 jnp.inf, -jnp.inf))
  return x.at[0, N:].set(garbage)


@functools.partial(jax.jit, **QUICK)
def garbage_inputs():
  """An input ``[2, N + PAD, D]``, it and it with garbage (``[2 inputs, ...]``), and the weights
  of the loss on the real positions (one program, not op by op)."""
  x = jax.random.normal(jax.random.key(7), (2, N + PAD, D))
  return x, jnp.stack([x, with_garbage(x)]), jax.random.normal(jax.random.key(8), (2, N, D))


def garbage_effect(build, call, names, params_of):
  """For each of ``names``: the real positions' outputs and the gradients of a loss on them, from
  the inputs with finite and with NaN/inf padding, in one program (the two vmapped).

  Args:
    build: ``name -> module``.
    call: ``(module, params, x) -> outputs [2, N + PAD, D]`` (the masks its own).
    names: the normalisations.
    params_of: ``({name: module}, x) -> {name: params}`` (made outside the program).

  Returns:
    ``{name: (outputs [2 inputs, 2, N, D], gradients (tree, leading axis of 2 inputs))}``.
  """
  x, xs, weights = garbage_inputs()
  modules = {name: build(name) for name in names}
  params = params_of(modules, x)

  @functools.partial(jax.jit, **QUICK)
  def both(params, xs):
    out = {}
    for name, module in modules.items():
      def loss(p, x, module=module):
        real = call(module, p, x)[:, :N]
        return jnp.sum(weights * real), real
      grad = jax.value_and_grad(loss, has_aux=True)
      (_, real), grads = jax.vmap(grad, in_axes=(None, 0))(params[name], xs)
      out[name] = (real, grads)
    return out
  return both(params, xs)


def assert_garbage_is_harmless(found):
  """Finite, and what finite padding gives: outputs of the real positions and every gradient."""
  for name, (real, grads) in found.items():
    assert np.isfinite(np.asarray(real)).all(), name
    assert_close(real[1], real[0], f"{name} outputs")
    for (path, leaf) in jax.tree_util.tree_leaves_with_path(grads):
      assert np.isfinite(np.asarray(leaf)).all(), (name, jax.tree_util.keystr(path))
      assert_close(leaf[1], leaf[0], f"{name} gradient {jax.tree_util.keystr(path)}")


LENGTHS_MASK = jnp.arange(N + PAD)[None] < jnp.array([[N], [N + PAD]])  # the first padded
# One normalisation per branch the module takes: row-local, over the queries with a parameter of
# its own, NAP's unscaled logits; "others" are the rest.
BRANCHES = ("softmax", "hnas", "nap")


def in_group(name, group):
  return (name in BRANCHES) == (group == "branches")


@pytest.mark.parametrize("group", ["branches", "others"])
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.fast_subset(  # the zeroing precedes the path and the normalisation
    lambda p: (p["implementation"], p["group"]) == ("quadratic", "branches"))
def test_nan_and_inf_in_the_padding_reach_no_real_output_nor_gradient(implementation, group):
  """Every normalisation on every path it has: 0 weight times NaN is NaN, and so was the
  projections' gradient at a NaN position, so one NaN in the padding turned the whole
  sequence's outputs and gradients NaN (as in flax's module); the module zeroes the inputs of
  the positions no mask lets take part."""
  names = [name for name in NORMALIZATIONS
           if has_path(name, implementation) and in_group(name, group)]
  build = lambda name: MultiHeadAttention(num_heads=H, normalization=name,
                                          implementation=implementation)
  init_all = lambda modules, x: jax.jit(lambda x: {  # one program for every module
      name: module.init(jax.random.key(9), x) for name, module in modules.items()}, **QUICK)(x)
  found = garbage_effect(
      build, lambda module, p, x: module.apply(p, x, padding_mask=LENGTHS_MASK), names, init_all)
  assert_garbage_is_harmless(found)


@pytest.mark.parametrize("group", ["branches", "others"])
@pytest.mark.parametrize("implementation", ["quadratic", "fused"])
@pytest.mark.fast_subset(  # the zeroing precedes the path and the normalisation
    lambda p: (p["implementation"], p["group"]) == ("quadratic", "branches"))
def test_nan_and_inf_in_the_padding_are_harmless_in_the_nnx_module_too(implementation, group):
  """The NNX module takes padding as flax's dense mask: every normalisation on the quadratic
  path, and the fused path of those that take a dense mask (its fast path takes none)."""
  from flax import nnx

  from normattn_jax.nnx import MultiHeadAttention as NnxAttention
  names = [name for name in NORMALIZATIONS if in_group(name, group) and (
      implementation == "quadratic"
      or (get(name).fused is not None and not get(name).normalizes_over_queries))]
  mask = nnx.make_attention_mask(LENGTHS_MASK, LENGTHS_MASK)
  build = lambda name: NnxAttention(H, D, normalization=name, implementation=implementation,
                                    decode=False, rngs=nnx.Rngs(0))
  graphs = {}

  def params_of(modules, x):
    states = {}
    for name, module in modules.items():
      graphs[name], states[name] = nnx.split(module)
    return states

  def call(module, state, x):
    return nnx.merge(graphs[module.normalization.name], state)(x, mask=mask)
  assert_garbage_is_harmless(garbage_effect(build, call, names, params_of))
