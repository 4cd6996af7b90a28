"""The fused paths (``jax.nn.dot_product_attention``) equal the quadratic definitions: values and
gradients (q, k, v and the per-head parameters) under every mask, bf16, huge logits, rows
without a key; the cuDNN arrangement of the inputs, run by XLA's kernel; the modules' wiring,
the "auto" rule and the errors."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from normattn_jax import MultiHeadAttention
from normattn_jax.attention import fused, registry
from normattn_jax.attention.registry import get
from normattn_jax.nnx import MultiHeadAttention as NnxAttention
from helpers import attention_paths
from helpers.attention_paths import dense_mask, lengths_mask

B, H, D, E = 2, 2, 4, 3
BLOCK = 4
# Per-head parameters away from their initial values, so that each one matters.
PARAMS = {
    "softmax": {},
    "dnas": {},
    "hnas": {"hybrid_weight": jnp.array([0.3, 0.8])},
    "sinkhorn": {},
    "sink": {"sink_logit": jnp.array([0.5, -1.5])},
    "ssmax": {"ssmax_scale": jnp.array([0.8, 1.4])},
}
NAMES = sorted(PARAMS)
ROW_WISE = ("sink", "softmax", "ssmax")  # they also take a dense mask
# The checks run in milliseconds; XLA's optimisation passes would take seconds per program.
QUICK = dict(compiler_options={"xla_backend_optimization_level": 0,
                               "xla_llvm_disable_expensive_passes": True})
quick = functools.partial(jax.jit, **QUICK)
out_and_grads = functools.partial(attention_paths.out_and_grads, jit=quick)
paths_out_and_grads = functools.partial(attention_paths.paths_out_and_grads, jit=quick)
largest = functools.partial(attention_paths.largest, floor=1.0)


# name -> (n_q, n_k, query_mask, key_mask, causal)
CASES = {
    "none": (7, 7, None, None, False),
    "masks": (7, 7, jnp.array([[1, 1, 0, 1, 1, 1, 0], [1, 0, 1, 1, 1, 1, 1]], bool),
              jnp.array([[1, 0, 1, 1, 0, 1, 1], [0, 1, 1, 1, 1, 1, 0]], bool), False),
    "causal": (7, 7, None, None, True),
    "padded_causal": (7, 7, lengths_mask([7, 4], 7), lengths_mask([7, 4], 7), True),
    "fully_masked_row": (7, 7, None, lengths_mask([7, 0], 7), False),  # batch 1 sees no key
    "q_shorter": (3, 9, None, lengths_mask([9, 6], 9), False),
    "q_shorter_causal": (4, 9, None, lengths_mask([9, 6], 9), True),
    "q_longer_causal": (9, 5, None, None, True),  # the first 4 queries see no key
}


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def inputs(n_q, n_k, dtype=jnp.float32, seed=0):
  """q, k, v in the fused layout ``[batch, n, heads, d]`` (one program per shape)."""
  ks = jax.random.split(jax.random.key(seed), 3)
  q = 1.5 * jax.random.normal(ks[0], (B, n_q, H, D))
  k = jax.random.normal(ks[1], (B, n_k, H, D))
  v = jax.random.normal(ks[2], (B, n_k, H, E))
  return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def quadratic(name, q, k, v, params, mask):
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k)
  weights = get(name).attention_weights(logits, mask, params)
  return jnp.einsum("bhqk,bkhe->bqhe", weights, v)


def fused_path(name, q, k, v, params, query_mask, key_mask, causal, mask=None):
  """The fused path; causal calls of DNAS, HNAS and Sinkhorn are compared with the opt-in."""
  return get(name).fused_attention(q, k, v, params, query_mask=query_mask, key_mask=key_mask,
                                   causal=causal, mask=mask, block_size=BLOCK,
                                   allow_future_leak=True)


def keyless_rows(mask, shape):
  """The rows of a dense ``[batch, 1, n_q, n_k]`` mask without a valid key, as ``shape``
  (``[batch, n_q, heads]``)."""
  return np.broadcast_to(np.swapaxes(~np.any(np.asarray(mask), -1), 1, 2), shape)


def assert_same(got, want, tol=1e-5):
  np.testing.assert_allclose(got[0], want[0], atol=tol, rtol=tol)
  for g, w in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1])):
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, w, atol=5 * tol * largest(w), rtol=0)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.fast_subset(lambda p: p["name"] == "dnas" or p["case"] == "padded_causal")
def test_values_and_gradients_equal_the_quadratic_path(name, case):
  n_q, n_k, qm, km, causal = CASES[case]
  q, k, v = inputs(n_q, n_k)
  mask = dense_mask(B, n_q, n_k, qm, km, causal)
  got, want = paths_out_and_grads([lambda *a: fused_path(name, *a, qm, km, causal),
                                   lambda *a: quadratic(name, *a, mask)], q, k, v, PARAMS[name])
  assert_same(got, want)
  empty = keyless_rows(mask, got[0].shape[:-1])
  assert np.all(np.asarray(got[0])[empty] == 0)  # rows without a valid key: zeros


def test_a_row_without_keys_is_zero_as_on_the_quadratic_path():
  """XLA's kernel alone spreads such a row evenly over the values; the quadratic path and the
  fused one give 0."""
  q, k, v = inputs(5, 5)
  no_keys = np.zeros((B, 5), bool)
  no_keys[0] = True
  no_keys = jnp.asarray(no_keys)
  mask = dense_mask(B, 5, 5, None, no_keys, False)

  @quick
  def every_path(q, k, v, params):  # one program for the kernel and every normalisation
    kernel_alone = jax.nn.dot_product_attention(q, k, k, mask=no_keys[:, None, None, :])
    return kernel_alone, {name: (fused_path(name, q, k, v, params[name], None, no_keys, False),
                                 quadratic(name, q, k, v, params[name], mask))
                          for name in NAMES}

  kernel_alone, outs = every_path(q, k, v, PARAMS)
  assert not np.allclose(kernel_alone[1], 0)
  for name, (got, want) in outs.items():
    assert np.all(np.asarray(got[1]) == 0) and np.all(np.asarray(want[1]) == 0), name


@pytest.mark.parametrize("name", ROW_WISE)
@pytest.mark.fast_subset(lambda p: p["name"] == "sink")
def test_a_dense_mask_equals_the_quadratic_path(name):
  n_q, n_k = 6, 8
  q, k, v = inputs(n_q, n_k, seed=2)
  key_mask = lengths_mask([8, 6], n_k)

  @jax.jit
  def masks(key_mask):
    mask = jax.random.bernoulli(jax.random.key(3), 0.6, (B, H, n_q, n_k)).at[1, 0, 2].set(False)
    return mask, mask & attention_paths.dense_mask(B, n_q, n_k, None, key_mask, True)

  mask, full = masks(key_mask)
  got = out_and_grads(lambda *a: fused_path(name, *a, None, key_mask, True, mask=mask),
                      q, k, v, PARAMS[name])
  want = out_and_grads(lambda *a: quadratic(name, *a, full), q, k, v, PARAMS[name])
  assert_same(got, want)
  assert np.all(np.asarray(got[0])[1, 2, 0] == 0)  # head 0's row 2 of batch 1 sees no key


@pytest.mark.parametrize("name", ["dnas", "hnas", "sinkhorn"])
def test_a_dense_mask_is_refused_where_the_offsets_need_structured_masks(name):
  q, k, v = inputs(4, 4)
  with pytest.raises(ValueError, match=f"{name!r} also normalises over the queries"):
    fused_path(name, q, k, v, PARAMS[name], None, None, False, mask=jnp.ones((4, 4), bool))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.fast_subset(lambda p: p["name"] in ("dnas", "sink"))
def test_bf16_inputs(name):
  n_q, n_k, qm, km, causal = CASES["padded_causal"]
  q, k, v = inputs(n_q, n_k, jnp.bfloat16, seed=3)
  got = quick(lambda *a: fused_path(name, *a, qm, km, causal))(q, k, v, PARAMS[name])
  assert got.dtype == jnp.bfloat16
  mask = dense_mask(B, n_q, n_k, qm, km, causal)
  want = quick(lambda *a: quadratic(name, *(x.astype(jnp.float32) for x in a[:3]), *a[3:]))(
      q, k, v, PARAMS[name], mask)
  np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=2e-2, rtol=2e-2)


def test_bf16_offsets_keep_float32_precision():
  """DNAS's offsets near 96 (every logit shifted by 96): one bf16 column would round them by up
  to 0.25 (a weight off by up to 28%); the second column keeps the remainder."""
  q, k, v = inputs(8, 8, seed=4)

  @quick
  def got_and_want(q, k, v):
    low = [x.astype(jnp.bfloat16) for x in (q.at[..., 0].set(1.0), k.at[..., 0].set(96.0), v)]
    return (fused.dnas_attention(*low),
            quadratic("dnas", *(x.astype(jnp.float32) for x in low), {}, None))

  got, want = got_and_want(q, k, v)
  np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.fast_subset(lambda p: p["name"] in ("softmax", "dnas"))
def test_huge_logits(name):
  """Logits in the thousands equal the quadratic path; at ~1e36 (q, k ~1e18) outputs and
  gradients stay finite and rows without a key stay 0."""
  n_q, n_k, qm, km, causal = CASES["padded_causal"]
  q, k, v = inputs(n_q, n_k, seed=5)
  mask = dense_mask(B, n_q, n_k, qm, km, causal)
  fn = lambda *a: fused_path(name, *a, qm, km, causal)
  got = out_and_grads(fn, 300.0 * q, k, v, PARAMS[name])
  want = quadratic(name, 300.0 * q, k, v, PARAMS[name], mask)
  np.testing.assert_allclose(got[0], want, atol=1e-3)
  out, grads = out_and_grads(fn, 1e18 * q, 1e18 * k, v, PARAMS[name])
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves((out, grads)))
  assert np.all(np.asarray(out)[keyless_rows(mask, out.shape[:-1])] == 0)


def test_leading_axes_and_unequal_value_width():
  """Any number of leading axes (flattened for the kernel) and values wider than the keys."""

  @quick
  def got_and_want(key):  # one program, not one per operation
    ks = jax.random.split(key, 4)
    q = jax.random.normal(ks[0], (2, 3, 5, H, D))
    k = jax.random.normal(ks[1], (2, 3, 6, H, D))
    v = jax.random.normal(ks[2], (2, 3, 6, H, 2 * D + 1))
    key_mask = jax.random.bernoulli(ks[3], 0.7, (2, 3, 6))
    got = fused.dnas_attention(q, k, v, key_mask=key_mask, causal=True, allow_future_leak=True)
    mask = key_mask[..., None, None, :] & jnp.tril(jnp.ones((5, 6), bool), 1)
    weights = get("dnas").attention_weights(jnp.einsum("...qhd,...khd->...hqk", q, k), mask, {})
    return got, jnp.einsum("...hqk,...khe->...qhe", weights, v)

  got, want = got_and_want(jax.random.key(6))
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


# ----- the cuDNN arrangement, run by XLA's kernel -----

def simulated_cudnn(monkeypatch, rounded_statistics=True):
  """Make the fused path see a cuDNN device, and run what it sends to cuDNN through XLA's
  kernel after checking cuDNN's conditions; returns the list of the calls' kernels. The
  log-sum-exp statistics come back rounded to the inputs' dtype, as jax hands them on, or (not
  ``rounded_statistics``) in float32, as XLA's GPU compiler may keep them."""
  kernels = []
  original = jax.nn.dot_product_attention

  def kernel(q, k, v, bias=None, mask=None, *, implementation=None, **kwargs):
    kernels.append(implementation)
    if implementation == "cudnn":
      assert q.dtype in fused.CUDNN_DTYPES and k.dtype == q.dtype == v.dtype
      assert q.shape[-1] % fused.CUDNN_WIDTH_MULTIPLE == 0
      assert q.shape[-1] <= fused.CUDNN_MAX_WIDTH
      assert bias is None and mask is None  # no dense bias, so no bias gradient either
      if kwargs.get("is_causal"):
        assert q.shape[1] == k.shape[1]
      assert q.shape[1] % 2 == 0 and k.shape[1] % 2 == 0  # its training kernel's lengths
      # cuDNN's float32 sums (and XLA's CPU kernel takes no fp16 dot)
      out = original(*(x.astype(jnp.float32) for x in (q, k, v)), bias, mask,
                     implementation="xla", **kwargs)
      if kwargs.get("return_residual"):
        out, lse = out
        return out.astype(q.dtype), lse.astype(q.dtype) if rounded_statistics else lse
      return out.astype(q.dtype)
    return original(q, k, v, bias, mask, implementation="xla", **kwargs)

  monkeypatch.setattr(fused, "cudnn_device", lambda: True)
  monkeypatch.setattr(jax.nn, "dot_product_attention", kernel)
  return kernels


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", ["masks", "padded_causal", "q_shorter"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.fast_subset(  # fp16's masked logit is one for all: two names check it, one case each
    lambda p: (p["name"], p["case"]) in (("dnas", "masks"), ("sink", "padded_causal"))
    if p["dtype"] == "float16" else p["case"] == "padded_causal")
def test_the_cudnn_arrangement_equals_the_quadratic_path(monkeypatch, name, case, dtype):
  kernels = simulated_cudnn(monkeypatch)
  n_q, n_k, qm, km, causal = CASES[case]
  q, k, v = inputs(n_q, n_k, jnp.dtype(dtype), seed=7)
  got = out_and_grads(lambda *a: fused_path(name, *a, qm, km, causal), q, k, v, PARAMS[name])
  assert kernels and set(kernels) == {"cudnn"}
  f32 = [x.astype(jnp.float32) for x in (q, k, v)]
  mask = dense_mask(B, n_q, n_k, qm, km, causal)
  want = out_and_grads(lambda *a: quadratic(name, *a, mask), *f32, PARAMS[name])
  np.testing.assert_allclose(got[0].astype(jnp.float32), want[0], atol=3e-2, rtol=3e-2)
  for g, w in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1])):
    scale = largest(w)
    np.testing.assert_allclose(np.asarray(g, np.float32), w, atol=5e-2 * scale, rtol=0)


@jax.jit
def logits_near_96(q, k):
  """q and k in bf16 with every logit shifted by about 96 (q's first entry 1, k's near 96)."""
  q, k = q.at[..., 0].set(1.0), k.at[..., 0].set(96.0 + k[..., 0])
  return q.astype(jnp.bfloat16), k.astype(jnp.bfloat16)


@pytest.mark.parametrize("kernel", ["simulated", "simulated_float32", "cudnn"])
@pytest.mark.parametrize("case", ["masks", "padded_causal", "q_shorter", "fully_masked_row"])
@pytest.mark.fast_subset(lambda p: p["kernel"] != "simulated_float32"
                         or p["case"] in ("padded_causal", "q_shorter"))
def test_dnas_offsets_from_the_kernels_statistics(monkeypatch, case, kernel):
  """On cuDNN, DNAS's offsets are the log-sum-exp statistics of the keys' attention over the
  queries, rounded to bf16 and refined by a second call: logsumexp over the valid queries in value
  (to float32 precision with logits near 96, where bf16 rounds by 0.25) and gradient. Run by XLA's
  kernel in cuDNN's arrangement (the statistics rounded, or kept in float32 as XLA's GPU compiler
  may keep them), and by cuDNN itself where there is an NVIDIA GPU."""
  if kernel == "cudnn" and not fused.cudnn_device():
    pytest.skip("needs an NVIDIA GPU of compute capability >= 8 (cuDNN's flash attention)")
  kernels = (spied_kernels(monkeypatch) if kernel == "cudnn" else
             simulated_cudnn(monkeypatch, rounded_statistics=kernel == "simulated"))
  n_q, n_k, qm, _, causal = CASES[case]
  q, k = logits_near_96(*inputs(n_q, n_k, seed=10)[:2])
  got = out_and_grads(functools.partial(fused.column_logsumexp, query_mask=qm, causal=causal),
                      q, k)
  assert kernels == ["cudnn"] * 2

  def want(q, k):
    sees = jnp.swapaxes(dense_mask(B, n_q, n_k, qm, None, causal)[:, 0], 1, 2)[:, :, None]
    logits = jnp.einsum("bqhd,bkhd->bkhq", q, k)
    lse = jax.nn.logsumexp(jnp.where(sees, logits, -1e30), axis=-1)
    return jnp.where(jnp.any(sees, -1), lse, 0.0)

  assert_same(got, out_and_grads(want, q.astype(jnp.float32), k.astype(jnp.float32)), 2e-3)


def spied_kernels(monkeypatch):
  """Record the kernel each ``jax.nn.dot_product_attention`` call asks for, changing nothing."""
  kernels = []
  original = jax.nn.dot_product_attention

  def kernel(*args, implementation=None, **kwargs):
    kernels.append(implementation)
    return original(*args, implementation=implementation, **kwargs)

  monkeypatch.setattr(jax.nn, "dot_product_attention", kernel)
  return kernels


@pytest.mark.parametrize("case", ["masks", "padded_causal", "q_shorter", "fully_masked_row"])
@pytest.mark.parametrize("name", NAMES)
def test_cudnns_kernel_equals_the_quadratic_path(monkeypatch, name, case):
  """On an NVIDIA GPU, cuDNN's own kernel (forward and backward) in bf16 against the quadratic
  definition in float32; skipped where there is none."""
  if not fused.cudnn_device():
    pytest.skip("needs an NVIDIA GPU of compute capability >= 8 (cuDNN's flash attention)")
  kernels = spied_kernels(monkeypatch)
  n_q, n_k, qm, km, causal = CASES[case]
  q, k, v = inputs(n_q, n_k, jnp.bfloat16, seed=7)
  got = out_and_grads(lambda *a: fused_path(name, *a, qm, km, causal), q, k, v, PARAMS[name],
                      jit=jax.jit)  # as a run compiles it
  assert kernels and set(kernels) == {"cudnn"}
  f32 = [x.astype(jnp.float32) for x in (q, k, v)]
  mask = dense_mask(B, n_q, n_k, qm, km, causal)
  want = out_and_grads(lambda *a: quadratic(name, *a, mask), *f32, PARAMS[name])
  np.testing.assert_allclose(got[0].astype(jnp.float32), want[0], atol=3e-2, rtol=3e-2)
  # the kernel hands back dq, dk, dv in bf16; a per-head parameter's gradient is a sum over them
  # in which terms cancel (Scalable-Softmax's scale: 7% off at q_shorter on an H200)
  for tol, (g, w) in zip([5e-2] * 3 + [1e-1] * len(PARAMS[name]),
                         zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1]))):
    scale = largest(w)
    assert np.all(np.isfinite(np.asarray(g, np.float32)))
    np.testing.assert_allclose(np.asarray(g, np.float32), w, atol=tol * scale, rtol=0)


def test_cudnn_is_left_to_xla_where_it_cannot_take_the_call(monkeypatch):
  kernels = simulated_cudnn(monkeypatch)
  q, k, v = inputs(5, 5)
  traced = lambda fn, *a, **kw: jax.eval_shape(functools.partial(fn, **kw), *a)  # the choice
  traced(fused.softmax_attention, q, k, v)  # float32
  low = [x.astype(jnp.bfloat16) for x in (q, k, v)]
  traced(fused.softmax_attention, *low, mask=jnp.ones((5, 5), bool))  # a dense mask
  traced(fused.softmax_attention, low[0][:, :3], *low[1:], causal=True)  # causal, unequal
  wide = [jnp.zeros((1, 4, 1, 127), jnp.bfloat16)] * 3
  assert kernels == ["xla"] * 3
  traced(fused.dnas_attention, *wide)  # 127 + 2 columns > 128: not XLA's kernel but fast.py's
  assert kernels == ["xla"] * 3       # exact path, which no kernel call's rounding touches
  traced(fused.softmax_attention, *wide[:2], jnp.zeros((1, 4, 1, 129), jnp.bfloat16))  # v: 129
  assert kernels == ["xla"] * 4
  traced(fused.softmax_attention, *wide)  # 127, padded to 128
  assert kernels[-1] == "cudnn"


# ----- the modules -----

def test_the_auto_rule(monkeypatch):
  bf16 = jnp.bfloat16
  takes = functools.partial(fused.takes_fused_path, num_keys=fused.AUTO_MIN_KEYS)
  monkeypatch.setattr(fused, "cudnn_device", lambda: False)
  for name in registry.names():
    assert not takes(get(name), "auto", [], bf16, 64), name  # without cuDNN
  monkeypatch.setattr(fused, "cudnn_device", lambda: True)
  auto = [name for name in registry.names() if takes(get(name), "auto", [], bf16, 64)]
  assert auto == ["softmax", "dnas", "hnas", "sink", "ssmax"]
  assert not takes(get("softmax"), "auto", [], bf16, 64, num_keys=fused.AUTO_MIN_KEYS - 1)
  assert takes(get("softmax"), "fused", [], bf16, 64, num_keys=8)  # asked for: any length
  assert not takes(get("softmax"), "auto", [], jnp.float32, 64)
  assert not takes(get("softmax"), "auto", [], bf16, 128)
  assert not takes(get("softmax"), "auto", [], bf16, 64, value_dim=136)
  assert not takes(get("softmax"), "auto", [], bf16, 64, dense_mask=True)
  assert not takes(get("softmax"), "auto", ["sow_weights"], bf16, 64)
  assert not takes(get("softmax"), "quadratic", [], bf16, 64)
  assert registry.fusable() == ("softmax", "dnas", "hnas", "sinkhorn", "nap", "non", "sink",
                               "ssmax")


def test_auto_takes_the_fused_path_on_cudnn_from_its_minimum_length(monkeypatch):
  kernels = simulated_cudnn(monkeypatch)
  x = jax.random.normal(jax.random.key(8), (1, fused.AUTO_MIN_KEYS, 16))
  layer = MultiHeadAttention(num_heads=2, normalization="dnas", dtype=jnp.bfloat16,
                             allow_future_leak=True)
  params = quick(layer.init)(jax.random.key(9), x[:, :6])
  apply = quick(lambda p, x: layer.apply(p, x, causal=True))
  kernels.clear()
  apply(params, x[:, :-1])
  assert kernels == []  # one key short: the quadratic path
  got = apply(params, x)
  assert kernels == ["cudnn"] * 3  # the offsets' two calls, then the attention
  quad = MultiHeadAttention(num_heads=2, normalization="dnas", implementation="quadratic",
                            allow_future_leak=True)
  want = quick(lambda p, x: quad.apply(p, x, causal=True))(params, x)
  np.testing.assert_allclose(got.astype(jnp.float32), want, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.fast_subset(lambda p: p["name"] in ("softmax", "hnas"))
def test_the_module_gives_the_quadratic_answer(name):
  x = jax.random.normal(jax.random.key(5), (2, 7, 8))
  memory = jax.random.normal(jax.random.key(6), (2, 5, 8))
  padding = lengths_mask([7, 5], 7)
  quad = MultiHeadAttention(num_heads=2, normalization=name, implementation="quadratic",
                            allow_future_leak=True)
  fuse = MultiHeadAttention(num_heads=2, normalization=name, implementation="fused",
                            block_size=BLOCK, allow_future_leak=True)
  params = quick(quad.init)(jax.random.key(6), x)
  params = {"params": dict(params["params"], **PARAMS[name])}  # away from the initial values

  @quick
  def both(params):
    calls = [dict(padding_mask=padding, causal=False), dict(padding_mask=padding, causal=True),
             dict(inputs_k=memory, query_mask=padding, key_mask=lengths_mask([5, 3], 5))]

    def out_and_grad(m, call):  # the output and the gradient of its squared sum, one pass
      def loss(p):
        out = m.apply(p, x, **call)
        return jnp.sum(out ** 2), out
      (_, out), grad = jax.value_and_grad(loss, has_aux=True)(params)
      return out, grad
    return [out_and_grad(m, call) for call in calls for m in (fuse, quad)]

  outs = both(params)
  for (got, got_grad), (want, want_grad) in zip(outs[::2], outs[1::2]):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(jax.tree.leaves(got_grad), jax.tree.leaves(want_grad)):
      np.testing.assert_allclose(g, w, atol=1e-4 * largest(w))


@pytest.mark.parametrize("name", ["sigmoid", "softpick", "sparsemax", "entmax15",
                                  "stickbreaking"])
def test_a_normalisation_that_cannot_be_fused_is_refused_at_construction(name):
  with pytest.raises(ValueError, match=f"implementation='fused': normalization {name!r} cannot "
                                       f"be fused.*fusable ones are"):
    MultiHeadAttention(num_heads=2, normalization=name, implementation="fused")
  with pytest.raises(ValueError, match=f"normalization {name!r} cannot be fused"):
    NnxAttention(2, 8, normalization=name, implementation="fused", rngs=nnx.Rngs(0))


def test_what_the_fused_path_cannot_take_is_refused():
  x = jnp.ones((1, 4, 8))
  layer = MultiHeadAttention(num_heads=2, normalization="dnas", implementation="fused")
  params = quick(layer.init)(jax.random.key(0), x)
  traced = lambda fn, *a, **kw: jax.eval_shape(functools.partial(fn, **kw), *a)  # refused there
  with pytest.raises(ValueError, match="a dense mask .*'dnas' takes query_mask"):
    traced(layer.apply, params, x, mask=jnp.ones((4, 4), bool))
  with pytest.raises(ValueError, match="sow_weights"):
    traced(layer.apply, params, x, sow_weights=True, mutable=["intermediates"])
  drop = MultiHeadAttention(num_heads=2, implementation="fused", dropout_rate=0.1,
                            deterministic=False)
  with pytest.raises(ValueError, match="attention dropout"):
    traced(drop.apply, params, x, rngs={"dropout": jax.random.key(1)})
  softmax = MultiHeadAttention(num_heads=2, implementation="fused")
  # a row-wise one takes it
  out = quick(lambda p, x: softmax.apply(p, x, mask=jnp.ones((4, 4), bool)))(params, x)
  assert out.shape == x.shape


def test_a_pretraining_config_refuses_it_before_building():
  from normattn_jax.pretrain import train as pretrain
  c = pretrain.base_pretrain_config()
  c.model.attention.name = "sigmoid"
  c.model.attention_implementation = "fused"
  with pytest.raises(ValueError,
                     match="model.attention_implementation.*'sigmoid'.*cannot be fused"):
    pretrain.validate_pretrain_config(c)


# ----- the NNX module -----

# the NNX module's wiring of the fused path: a row-wise softmax (its dense mask too) and HNAS
# (over the queries, with its own parameter); each normalisation's fused path:
# test_values_and_gradients_equal_the_quadratic_path
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.fast_subset(lambda p: p["name"] in ("softmax", "hnas"))
def test_nnx_fused_equals_quadratic(name):
  x = jax.random.normal(jax.random.key(1), (2, 6, 16))
  key_mask = nnx.make_attention_mask(jnp.ones((2, 6)), lengths_mask([4, 6], 6))
  modules = {impl: NnxAttention(4, 16, normalization=name, implementation=impl, decode=False,
                                allow_future_leak=True, rngs=nnx.Rngs(0))
             for impl in ("quadratic", "fused")}
  calls = [dict(is_causal=True)] + [dict(mask=key_mask)] * (name in ROW_WISE)
  for call in calls:
    got, want = (nnx.jit(lambda m, x, call=call: m(x, **call))(modules[impl], x)
                 for impl in ("fused", "quadratic"))
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=f"{name} {call}")


def test_nnx_fused_softmax_decodes():
  x = jax.random.normal(jax.random.key(2), (2, 5, 16))
  module = NnxAttention(4, 16, implementation="fused", decode=False, rngs=nnx.Rngs(0))
  full = nnx.jit(lambda m, x: m(x, is_causal=True))(module, x)  # one program, not op by op
  module.init_cache(x.shape)
  step = nnx.jit(lambda m, x: m(x, decode=True))  # one program for the five steps
  steps = [step(module, x[:, i:i + 1]) for i in range(5)]
  np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, atol=1e-5, rtol=1e-5)


def test_fused_functions_check_their_inputs():
  q, k, v = inputs(4, 4)
  with pytest.raises(TypeError, match="floating point, got dtype int32"):
    fused.softmax_attention(q.astype(jnp.int32), k, v)
  with pytest.raises(ValueError, match="incompatible shapes"):
    fused.softmax_attention(q, k[..., :3], v)
  with pytest.raises(ValueError, match="key_mask must be boolean"):
    fused.softmax_attention(q, k, v, key_mask=jnp.ones((B, 5), bool))
  with pytest.raises(ValueError, match="does not broadcast"):
    fused.softmax_attention(q, k, v, mask=jnp.ones((3, 4, 4), bool))
  with pytest.raises(ValueError, match="need at least one query"):
    fused.softmax_attention(q[:, :0], k, v)
