"""normattn_jax.nnx.MultiHeadAttention: flax.nnx's module with a choice of normalisation."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import normattn_jax as na
from normattn_jax.attention import AttentionSpec, registry
from normattn_jax.nnx import MultiHeadAttention, load_linen_params

B, N, F, H = 2, 6, 16, 4
X = jax.random.normal(jax.random.key(1), (B, N, F))
VALID = jnp.arange(N)[None] < jnp.array([[4], [6]])       # the first example's last 2 padded
KEY_MASK = nnx.make_attention_mask(jnp.ones((B, N)), VALID)  # float 0/1, as flax makes it


@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_softmax_is_flax(num_kv_heads):
  """Same seed, same state tree and the same outputs as flax's module (masks, grouped heads,
  dropout with the same stream, sow_weights)."""
  kwargs = dict(num_kv_heads=num_kv_heads, dropout_rate=0.3, decode=False)
  ours = MultiHeadAttention(H, F, rngs=nnx.Rngs(0), **kwargs)
  theirs = nnx.MultiHeadAttention(H, F, rngs=nnx.Rngs(0), **kwargs)
  assert jax.tree.structure(nnx.state(ours)) == jax.tree.structure(nnx.state(theirs))
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(_data(a), _data(b)),
               nnx.state(ours), nnx.state(theirs))
  calls = (dict(mask=KEY_MASK, deterministic=True), dict(is_causal=True, deterministic=True),
           dict(mask=KEY_MASK, deterministic=False))
  run = nnx.jit(lambda m: [m(X, **call) for call in calls])  # one program each, not op by op
  for got, want in zip(run(ours), run(theirs)):
    np.testing.assert_allclose(got, want, atol=1e-5)
  nnx.jit(lambda m: m(X, mask=KEY_MASK, deterministic=True, sow_weights=True))(ours)
  weights = nnx.pop(ours, nnx.Intermediate)["attention_weights"][0]
  assert weights.shape == (B, H, N, N)
  np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)


def _data(leaf):
  """An array leaf of a state, a random key as its data."""
  return jax.random.key_data(leaf) if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf


@pytest.mark.parametrize("name", registry.names())
@pytest.mark.fast_subset(  # no head parameter, HNAS's over the queries, one row-local's (sink's);
    lambda p: p["name"] in ("softmax", "hnas", "sink"))  # sigmoid's and ssmax's copy alike
def test_linen_params_give_linen_outputs(name):
  """Every registered normalisation: the Linen module's params copied in, the same outputs, with
  a padding mask and with cross-attention to a longer sequence."""
  spec = AttentionSpec("hnas", {"hybrid_init": 0.2}) if name == "hnas" else name
  linen = na.MultiHeadAttention(num_heads=H, normalization=spec)
  params = linen.init(jax.random.key(2), X)["params"]
  ours = MultiHeadAttention(H, F, normalization=spec, decode=False, rngs=nnx.Rngs(0))
  assert set(ours.head_params()) == set(registry.get(name).param_names)
  for param in ours.head_params().values():
    assert param.shape == (H,)
  params = jax.tree.map(lambda p: p + 0.1 * jax.random.normal(jax.random.key(3), p.shape),
                        params)  # away from the initial values, so the copy shows
  load_linen_params(ours, params)
  mask = KEY_MASK.astype(bool) & VALID[:, None, :, None]
  np.testing.assert_allclose(ours(X, mask=mask), linen.apply({"params": params}, X, mask=mask),
                             atol=1e-5)
  np.testing.assert_allclose(ours(X, mask=KEY_MASK),
                             linen.apply({"params": params}, X, mask=KEY_MASK.astype(bool)),
                             atol=1e-5)
  memory = jax.random.normal(jax.random.key(4), (B, N + 3, F))
  np.testing.assert_allclose(ours(X, memory), linen.apply({"params": params}, X, memory),
                             atol=1e-5)


@pytest.mark.parametrize("implementation", ["quadratic", "fast"])
def test_fast_path_takes_is_causal(implementation):
  """is_causal on the fast path equals the quadratic causal pass (NAP's linear prefix sums)."""
  quadratic = MultiHeadAttention(H, F, normalization="nap", implementation="quadratic",
                                 decode=False, rngs=nnx.Rngs(0))
  other = MultiHeadAttention(H, F, normalization="nap", implementation=implementation,
                             decode=False, rngs=nnx.Rngs(0))
  causal = nnx.jit(lambda module: module(X, is_causal=True))  # one program, not op by op
  np.testing.assert_allclose(causal(other), causal(quadratic), atol=1e-5)


@pytest.mark.parametrize("name", ["softmax", "nap", "sink"])
@pytest.mark.fast_subset(  # the sink's decode, jitted: test_transforms_see_the_head_params
    lambda p: p["name"] != "sink")
def test_decode_equals_the_causal_pass(name):
  """One position at a time through the key/value cache gives the full causal pass."""
  module = MultiHeadAttention(H, F, normalization=name, decode=False, rngs=nnx.Rngs(0))
  full = nnx.jit(lambda m: m(X, is_causal=True))(module)  # one program, not op by op
  module.init_cache(X.shape)
  step = nnx.jit(lambda m, x: m(x, decode=True))  # one program for every step
  steps = [step(module, X[:, i:i + 1]) for i in range(N)]
  np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, atol=1e-5)


class Tiny(nnx.Module):
  """An attention layer and a linear read-out."""

  def __init__(self, rngs: nnx.Rngs):
    self.attention = MultiHeadAttention(H, F, normalization="nap", decode=False, rngs=rngs)
    self.readout = nnx.Linear(F, 1, rngs=rngs)

  def __call__(self, x):
    return self.readout(self.attention(x, is_causal=True))


def test_seed_ensemble_with_vmap():
  """nnx.vmap over three seeds: three models, three different outputs, one compiled call."""
  ensemble = nnx.jit(nnx.vmap(lambda key: Tiny(nnx.Rngs(key))))(
      jax.random.split(jax.random.key(0), 3))
  assert ensemble.attention.nap_gain.shape == (3, H)
  outputs = nnx.jit(nnx.vmap(lambda model, x: model(x), in_axes=(0, None)))(ensemble, X)
  assert outputs.shape == (3, B, N, 1)
  for i in range(3):
    for j in range(i):
      assert not np.allclose(outputs[i], outputs[j])


def test_errors_name_the_field_and_value():
  """Refused before anything is built: a bad normalisation, option, implementation, dropout,
  the Linen-only options, a custom attention_fn, and decoding what cannot decode."""
  build = lambda **kw: MultiHeadAttention(H, F, rngs=nnx.Rngs(0), **kw)
  with pytest.raises(ValueError, match="no_such"):
    build(normalization="no_such")
  with pytest.raises(ValueError, match="sinkhorn_iters"):
    build(normalization=AttentionSpec("sinkhorn", {"sinkhorn_iters": 0}))
  with pytest.raises(ValueError, match="no option 'iters'"):
    build(normalization=AttentionSpec("sinkhorn", {"iters": 3}))
  with pytest.raises(ValueError, match="implementation"):
    build(implementation="linear")
  with pytest.raises(ValueError, match="dropout_rate"):
    build(dropout_rate=1.0)
  with pytest.raises(ValueError, match="output_gate='headwise'.*Linen"):
    build(output_gate="headwise")
  with pytest.raises(ValueError, match="qk_norm='rms'.*normalize_qk"):
    build(qk_norm="rms")
  with pytest.raises(ValueError, match="differential=True"):
    build(differential=True)
  with pytest.raises(ValueError, match="output_gate must be one of"):
    build(output_gate="gated")
  with pytest.raises(ValueError, match="attention_fn"):
    build(attention_fn=lambda *a, **k: None)
  with pytest.raises(ValueError, match="decode=True.*'dnas'.*over the queries"):
    build(normalization="dnas", decode=True)
  module = build(normalization="sinkhorn", decode=False)
  with pytest.raises(ValueError, match="decode=True.*'sinkhorn'"):
    module.init_cache(X.shape)
  with pytest.raises(ValueError, match="decode=True.*'sinkhorn'"):
    module(X[:, :1], decode=True)
  with pytest.raises(ValueError, match="cannot take a dense mask; pass is_causal"):
    build(normalization="nap", implementation="fast", decode=False)(X, mask=KEY_MASK)
  with pytest.raises(ValueError, match="no fast path"):
    build(normalization="sparsemax", implementation="fast", decode=False)(X)


def test_transforms_see_the_head_params():
  """split/merge keeps the module, nnx.jit runs it (decode too), nnx.grad reaches the per-head
  parameters."""
  module = MultiHeadAttention(H, F, normalization="hnas", decode=False, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(module)
  run = nnx.jit(lambda m: m(X))  # one program for both, not op by op
  np.testing.assert_array_equal(run(nnx.merge(graphdef, state)), run(module))
  grads = nnx.jit(nnx.grad(lambda m: (m(X, mask=KEY_MASK) ** 2).sum()))(module)
  assert np.all(np.abs(grads.hybrid_weight[...]) > 0)
  sink = MultiHeadAttention(H, F, normalization="sink", decode=False, rngs=nnx.Rngs(0))
  full = nnx.jit(lambda m: m(X, is_causal=True))(sink)
  sink.init_cache(X.shape)
  step = nnx.jit(lambda m, x: m(x, decode=True))
  np.testing.assert_allclose(jnp.concatenate([step(sink, X[:, i:i + 1]) for i in range(N)], 1),
                             full, atol=1e-5)


HUGE = 1e18  # the query and key kernels' scale: logits about 1e18


def _huge_logit_runs(implementation: str) -> dict:
  """Every normalisation with the path, causal (DNAS's leak accepted: the paths are compared),
  its query and key kernels scaled so that the logits are about ``HUGE``: the outputs and the
  parameters' gradients of its ``implementation`` and of its quadratic path, in one program."""
  names = [n for n in registry.names()
           if getattr(registry.get(n), implementation) is not None]
  graphs, states = {}, {}
  for name in names:
    for impl in (implementation, "quadratic"):
      module = MultiHeadAttention(H, F, normalization=name, implementation=impl, decode=False,
                                  allow_future_leak=True, rngs=nnx.Rngs(0))
      for layer in (module.query, module.key):
        layer.kernel[...] = layer.kernel[...] * np.sqrt(HUGE)
      graphs[name, impl], states[name, impl] = nnx.split(module)

  @jax.jit
  def run(states):
    def out(key, state):
      return nnx.merge(graphs[key], state)(X, is_causal=True)
    return {key: (out(key, state), jax.grad(lambda s, key=key: jnp.sum(out(key, s) ** 2))(state))
            for key, state in states.items()}
  return run(states)


@pytest.mark.slow  # two programs of every normalisation, forward and backward
@pytest.mark.parametrize("implementation", ["fast", "fused"])
def test_the_fast_and_fused_paths_are_exact_at_huge_logits(implementation):
  """The NNX module's fast and fused paths at logits about 1e18: finite outputs and gradients,
  and the quadratic path's outputs."""
  found = _huge_logit_runs(implementation)
  for (name, impl), (out, grads) in found.items():
    assert np.isfinite(np.asarray(out)).all(), (name, impl)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads)), (name, impl)
    if impl != "quadratic":
      want = np.asarray(found[name, "quadratic"][0])
      np.testing.assert_allclose(out, want, atol=1e-4 * (1 + np.abs(want).max()),
                                 err_msg=f"{name} {impl}")
