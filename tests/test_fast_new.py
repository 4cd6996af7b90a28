"""The blockwise paths of sigmoid, sink, softpick, Scalable-Softmax and stick-breaking equal the
registered quadratic weights (``fast_attention`` vs ``attention_weights`` then ``A V``): values
and gradients (q, k, v and the per-head parameters), under every mask, for q shorter than k and
for bf16 inputs."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.attention import fast
from normattn_jax.attention.registry import get
from helpers.attention_paths import dense_mask, largest, lengths_mask, paths_out_and_grads

B, H, D, E = 2, 2, 4, 3
BLOCK = 4  # n_q = 7 or 9: the last query block is padded
# Per-head parameters away from their initial values, so that each one matters.
PARAMS = {
    "sigmoid": {"sigmoid_bias": jnp.array([0.4, -0.7])},
    "sink": {"sink_logit": jnp.array([0.5, -1.5])},
    "softpick": {},
    "ssmax": {"ssmax_scale": jnp.array([0.8, 1.4])},
    "stickbreaking": {},
}
NAMES = sorted(PARAMS)


# name -> (n_q, n_k, query_mask, key_mask, causal)
CASES = {
    "none": (7, 7, None, None, False),
    "key_mask": (7, 7, None, jnp.array([[1, 0, 1, 1, 0, 1, 1], [0, 1, 1, 1, 1, 1, 0]], bool),
                 False),
    "query_mask": (7, 7, jnp.array([[1, 1, 0, 1, 1, 1, 0], [1, 0, 1, 1, 1, 1, 1]], bool), None,
                   False),
    "causal": (7, 7, None, None, True),
    "padded_causal": (7, 7, lengths_mask([7, 4], 7), lengths_mask([7, 4], 7), True),
    "fully_masked_row": (7, 7, None, lengths_mask([7, 0], 7), False),  # batch 1 sees no key
    "q_shorter": (3, 9, None, lengths_mask([9, 6], 9), False),
    "q_shorter_causal": (3, 9, None, None, True),
    "q_longer_causal": (9, 5, None, None, True),  # the first 4 queries see no key
}


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def inputs(n_q, n_k, dtype=jnp.float32, seed=0):
  """q, k, v ``[batch, heads, n, d]`` (one program per shape)."""
  ks = jax.random.split(jax.random.key(seed), 3)
  q = 1.5 * jax.random.normal(ks[0], (B, H, n_q, D))
  k = jax.random.normal(ks[1], (B, H, n_k, D))
  v = jax.random.normal(ks[2], (B, H, n_k, E))
  return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def quadratic(name, q, k, v, params, mask):
  logits = jnp.einsum("...qd,...kd->...qk", q, k)
  return jnp.einsum("...qk,...ke->...qe", get(name).attention_weights(logits, mask, params), v)


def fast_path(name, q, k, v, params, query_mask, key_mask, causal):
  return get(name).fast_attention(q, k, v, params, query_mask=query_mask, key_mask=key_mask,
                                  causal=causal, block_size=BLOCK)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.fast_subset(lambda p: p["name"] == "stickbreaking" or p["case"] == "padded_causal")
def test_values_and_gradients_equal_the_quadratic_path(name, case):
  n_q, n_k, qm, km, causal = CASES[case]
  q, k, v = inputs(n_q, n_k)
  mask = dense_mask(B, n_q, n_k, qm, km, causal)
  params = PARAMS[name]
  (got, got_g), (want, want_g) = paths_out_and_grads(
      [lambda *a: fast_path(name, *a, qm, km, causal), lambda *a: quadratic(name, *a, mask)],
      q, k, v, params)
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
  empty = np.broadcast_to(~np.any(np.asarray(mask), -1), got.shape[:-1])
  assert np.all(np.asarray(got)[empty] == 0)  # rows without a valid key
  for got, want in zip(jax.tree.leaves(got_g), jax.tree.leaves(want_g)):
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, atol=5e-5 * largest(want, floor=1.0), rtol=0)


# the fast paths' bf16 inputs: the sink's (its parameter and log-sum-exp) and stick-breaking's
# (its own blockwise sums) here, DNAS's and NAP's in test_fast.py
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.fast_subset(lambda p: p["name"] in ("sink", "stickbreaking"))
def test_bf16_inputs(name):
  n_q, n_k, qm, km, causal = CASES["padded_causal"]
  q, k, v = inputs(n_q, n_k, jnp.bfloat16, seed=3)
  mask = dense_mask(B, n_q, n_k, qm, km, causal)

  @jax.jit  # one program, as a run compiles it, not one per operation
  def got_and_want(q, k, v, params):
    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    return (fast_path(name, q, k, v, params, qm, km, causal),
            quadratic(name, *f32, params, mask))

  got, want = got_and_want(q, k, v, PARAMS[name])
  assert got.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=2e-2, rtol=2e-2)


def test_sink_is_softmax_scaled_by_its_lse():
  q, k, v = inputs(7, 7)

  @jax.jit  # one program, not one per operation
  def sink_and_scaled_softmax(q, k, v):
    out = fast.sink_attention(q, k, v, 0.0, causal=True, block_size=BLOCK)
    soft = fast.softmax_attention(q, k, v, causal=True, block_size=BLOCK)
    lse = jax.nn.logsumexp(jnp.where(dense_mask(B, 7, 7, None, None, True),
                                     jnp.einsum("...qd,...kd->...qk", q, k), -jnp.inf), -1)
    return out, soft * jax.nn.sigmoid(lse)[..., None]

  np.testing.assert_allclose(*sink_and_scaled_softmax(q, k, v), atol=1e-6, rtol=1e-6)


def test_huge_logits_stay_finite():
  q, k, v = inputs(7, 7)
  outs = jax.jit(lambda q, k, v, params: {  # one program for all
      name: fast_path(name, 1e4 * q, k, v, params[name], None, None, True) for name in NAMES})(
          q, k, v, PARAMS)
  for name, out in outs.items():
    assert np.all(np.isfinite(out)), name


def test_auto_takes_the_measured_paths():
  from normattn_jax.attention.module import fast_is_faster
  for name in ("sigmoid", "sink", "softpick", "ssmax"):
    assert fast_is_faster(name, 1024, 1024, 64, False), name
    assert not fast_is_faster(name, 512, 4096, 64, True), name
  assert not fast_is_faster("stickbreaking", 4096, 4096, 64, False, num_logits=8 * 4096 * 4096)
  assert fast_is_faster("stickbreaking", 8192, 8192, 64, False, num_logits=8 * 8192 * 8192)
  assert get("sparsemax").fast is None and get("entmax15").fast is None


# the module's wiring of a per-head parameter into the fast path: the sink's; the others' fast
# paths: test_values_and_gradients_equal_the_quadratic_path, the module's fast path:
# test_fast.py::test_module_paths_agree_with_the_same_params
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.fast_subset(lambda p: p["name"] == "sink")
def test_the_module_gives_one_answer_on_both_paths(name):
  from normattn_jax import MultiHeadAttention
  x = jax.random.normal(jax.random.key(5), (2, 7, 8))
  padding = lengths_mask([7, 5], 7)
  quad = MultiHeadAttention(num_heads=2, normalization=name, implementation="quadratic")
  quick = MultiHeadAttention(num_heads=2, normalization=name, implementation="fast",
                             block_size=BLOCK)
  params = jax.jit(quad.init)(jax.random.key(6), x)
  params = {"params": dict(params["params"], **PARAMS[name])}  # away from the initial values
  outputs = jax.jit(lambda params: [  # one program for both paths, both masks
      (quick.apply(params, x, padding_mask=padding, causal=causal),
       quad.apply(params, x, padding_mask=padding, causal=causal)) for causal in (False, True)])
  for got, want in outputs(params):
    np.testing.assert_allclose(got[:, :5], want[:, :5], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(got[0], want[0], atol=1e-5, rtol=1e-5)
