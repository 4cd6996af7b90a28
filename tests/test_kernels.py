"""The Pallas kernels equal the XLA path, run in Pallas' interpret mode on the CPU: the
feed-forward sub-block (values and gradients of every parameter and the input, both layouts,
padded widths and several hidden chunks; the GPU's blocks and the TPU's), the fused attention
through jax's TPU flash kernel, and NAP's and NON's attention kernels, against the quadratic
definitions. The kernels are used only
where chosen or measured faster (``kernels.rules``), and bad choices are refused by name."""
import functools
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.attention import fused
from normattn_jax.attention.registry import get
from normattn_jax.blocks import TransformerBlock
from normattn_jax.feedforward import takes_kernel
from normattn_jax.kernels import ffn, platform, rules
from normattn_jax.precision import BF16_TOLERANCES
from helpers.attention_paths import dense_mask, lengths_mask, out_and_grads
from helpers.sweeps import tiny_sweep_config

# d = 24 (padded to 32 on a GPU), a hidden layer of 200 (two chunks of 128, the second padded)
# or of 96 (one chunk, padded), 2 x 6 = 12 rows (one padded block): every padding at once
BATCH, N, D, HIDDEN = 2, 6, 24, 200


@functools.partial(jax.jit, static_argnums=0)
def block_inputs(dtype=jnp.float32):
  """The input ``[batch, n, d]`` and its padding mask (one program)."""
  x = jax.random.normal(jax.random.key(0), (BATCH, N, D)).astype(dtype)
  return x, lengths_mask([N, 4], N)


def block_paths(arch, dtype=jnp.float32, ffn_features=HIDDEN):
  """The block's output and gradients (parameters, input) on the XLA path and on the kernels,
  and the two parameter trees as each initialises them."""
  x, mask = block_inputs(dtype)
  out = {}
  for implementation in ("xla", "pallas"):
    block = TransformerBlock(num_heads=2, arch=arch, ffn_features=ffn_features, dtype=dtype,
                             ffn_implementation=implementation)
    params = jax.jit(block.init)(jax.random.key(1), x, mask)  # one program, not op by op
    out[implementation] = params, out_and_grads(
        lambda p, x, block=block: block.apply(p, x, mask).astype(jnp.float32), params, x)
  return out


def assert_close(got, want, tol):
  """Values within ``tol``, gradients within ``tol`` of each leaf's largest entry (or 1)."""
  np.testing.assert_allclose(got[0], want[0], atol=tol, rtol=tol)
  for g, w in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1])):
    g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
    np.testing.assert_allclose(g, w, atol=tol * max(float(np.max(np.abs(w))), 1.0), rtol=0)


def relative_error(got, want) -> float:
  """The distance of two trees over the size of ``want`` (float32, every leaf together): for
  one array, the root mean square of the error over that of ``want``."""
  flat = lambda tree: np.concatenate([np.asarray(x, np.float32).ravel()
                                      for x in jax.tree.leaves(tree)])
  return float(np.linalg.norm(flat(got) - flat(want)) / np.linalg.norm(flat(want)))


@pytest.fixture(scope="module", params=[("mte", HIDDEN, 2), ("bert", 4 * D, 1)])
def paths(request):
  arch, hidden, chunks = request.param
  config = ffn.make_config(arch, 1e-3, BATCH * N, D, hidden)
  assert (config.d_padded, config.ffn_padded, config.chunks, config.rows) == (
      32, 128 * chunks, chunks, 16)
  return block_paths(arch, ffn_features=hidden)


def test_the_ffn_kernels_equal_the_xla_path(paths):
  """MTE over two chunks of hidden features, BERT over one (each pass over the chunks reusing
  it)."""
  (params, got), (xla_params, want) = paths["pallas"], paths["xla"]
  chex.assert_trees_all_equal(params, xla_params)  # one parameter tree, same initial values
  assert_close(got, want, 2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["mte", "bert"])
def test_the_ffn_kernels_in_bf16_stay_within_the_bf16_tolerances(arch):
  f32 = block_paths(arch)["xla"][1]
  bf16 = block_paths(arch, jnp.bfloat16)
  for implementation in ("xla", "pallas"):
    out, grads = bf16[implementation][1]
    assert relative_error(out, f32[0]) < BF16_TOLERANCES["output_rms"], implementation
    assert relative_error(grads, f32[1]) < BF16_TOLERANCES["gradient"], implementation


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["mte", "bert", "sum"])
def test_the_ffn_kernels_on_the_tpu_blocks_equal_the_xla_path(arch):
  """The TPU's blocks (128 rows, 128 hidden features, widths unpadded); "sum" pools, with a
  hidden layer of 6d + 1 features."""
  with platform.tracing_for("tpu", interpret=True):
    out = block_paths(arch, ffn_features=None if arch == "sum" else 300)
  assert_close(out["pallas"][1], out["xla"][1], 2e-5)


@pytest.mark.slow
def test_the_ffn_kernels_over_a_models_axis_equal_the_xla_path():
  """vmapped as a grid vmaps its models (each with its own parameters)."""
  x, mask = block_inputs()
  xs = jnp.stack([x, 2 * x, -x])
  result = {}
  for implementation in ("xla", "pallas"):
    block = TransformerBlock(num_heads=2, arch="mte", ffn_implementation=implementation)
    params = jax.vmap(lambda k: block.init(k, x, mask))(jax.random.split(jax.random.key(4), 3))
    result[implementation] = out_and_grads(jax.vmap(
        lambda p, x, block=block: block.apply(p, x, mask)), params, xs)
  assert_close(result["pallas"], result["xla"], 2e-5)


# ----- the fused attention on a TPU: jax's Pallas flash kernel -----

HEADS, WIDTH = 2, 4
PARAMS = {"softmax": {}, "dnas": {}, "hnas": {"hybrid_weight": jnp.array([0.3, 0.8])},
          "sink": {"sink_logit": jnp.array([0.5, -1.5])},
          "ssmax": {"ssmax_scale": jnp.array([0.8, 1.4])}}
# name -> (n_q, n_k, query_mask, key_mask, causal)
CASES = {"masks": (7, 7, lengths_mask([7, 5], 7), lengths_mask([6, 7], 7), False),
         "padded_causal": (7, 7, lengths_mask([7, 4], 7), lengths_mask([7, 4], 7), True),
         "q_shorter": (3, 9, None, lengths_mask([9, 6], 9), False)}


@functools.partial(jax.jit, static_argnums=(0, 1))
def attention_inputs(n_q, n_k):
  """q, k, v ``[batch, n, heads, width]`` (one program per shape)."""
  ks = jax.random.split(jax.random.key(0), 3)
  return (1.5 * jax.random.normal(ks[0], (BATCH, n_q, HEADS, WIDTH)),
          jax.random.normal(ks[1], (BATCH, n_k, HEADS, WIDTH)),
          jax.random.normal(ks[2], (BATCH, n_k, HEADS, WIDTH)))


def quadratic(name, q, k, v, params, mask):
  weights = get(name).attention_weights(jnp.einsum("bqhd,bkhd->bhqk", q, k), mask, params)
  return jnp.einsum("bhqk,bkhe->bqhe", weights, v)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.fast_subset(lambda p: p["name"] == "sink" and p["case"] == "padded_causal")
def test_the_tpu_flash_kernel_equals_the_quadratic_path(name, case):
  """The sink (its key and column, a key mask in the column, the causal mask with the sink's
  query in front, lengths padded to whole blocks) in ``make test``; every normalisation with a
  fused path and every case in ``make test-all``."""
  n_q, n_k, query_mask, key_mask, causal = CASES[case]
  q, k, v = attention_inputs(n_q, n_k)
  with platform.tracing_for("tpu", interpret=True):
    assert fused.kernel_for(jnp.float32, WIDTH + 1) == "pallas"
    # causal calls of DNAS and HNAS are compared with the opt-in (test_causality.py)
    fn = lambda *a: get(name).fused_attention(*a, query_mask=query_mask, key_mask=key_mask,
                                              causal=causal, mask=None, block_size=4,
                                              allow_future_leak=True)
    got = out_and_grads(fn, q, k, v, PARAMS[name])
    assert "pallas_call" in str(jax.make_jaxpr(fn)(q, k, v, PARAMS[name]))
  want = out_and_grads(lambda *a: quadratic(  # the mask in the program, not op by op
      name, *a, dense_mask(BATCH, n_q, n_k, query_mask, key_mask, causal)), q, k, v, PARAMS[name])
  assert_close(got, want, 2e-5)


# ----- NAP's and NON's attention kernels -----

NAP_PARAMS = {"nap": {"nap_gain": jnp.array([0.7, 1.3]), "nap_bias": jnp.array([0.1, -0.2])},
              "non": {}}
NAP_CASES = dict(CASES, dense=(7, 5, None, None, False))  # a dense mask of its own
LAYOUTS_ON = {"gpu": "cpu", "tpu": "tpu"}  # the GPU's blocks are the CPU's, interpreted


def sparse_dense_mask(n_q, n_k):
  """A dense ``[batch, heads, n_q, n_k]`` mask with a row of no valid key."""
  keep = jax.random.bernoulli(jax.random.key(7), 0.7, (BATCH, HEADS, n_q, n_k))
  return keep.at[0, 1, 2].set(False)


@pytest.mark.parametrize("layout", sorted(LAYOUTS_ON))
@pytest.mark.parametrize("case", sorted(NAP_CASES))
@pytest.mark.parametrize("name", sorted(NAP_PARAMS))
@pytest.mark.fast_subset(lambda p: (p["name"], p["case"], p["layout"]) in {
    ("nap", "padded_causal", "gpu"), ("non", "dense", "tpu")})
def test_the_nap_and_non_kernels_equal_the_quadratic_path(name, case, layout):
  """Values and the gradients of q, k, v and NAP's per-head gain and bias, in float32: the
  fused layout read strided (the GPU's) and heads first (the TPU's); key and query masks,
  causal with padding, fewer queries than keys, a dense mask with an empty row. NAP's padded
  causal case and NON's dense one in ``make test``."""
  n_q, n_k, query_mask, key_mask, causal = NAP_CASES[case]
  mask = sparse_dense_mask(n_q, n_k) if case == "dense" else None
  q, k, v = attention_inputs(n_q, n_k)
  with platform.tracing_for(LAYOUTS_ON[layout], interpret=True):
    fn = lambda *a: get(name).fused_attention(*a, query_mask=query_mask, key_mask=key_mask,
                                              causal=causal, mask=mask)
    got = out_and_grads(fn, q, k, v, NAP_PARAMS[name])
    assert "pallas_call" in str(jax.make_jaxpr(fn)(q, k, v, NAP_PARAMS[name]))
  full = dense_mask(BATCH, n_q, n_k, query_mask, key_mask, causal)
  want = out_and_grads(lambda *a: quadratic(name, *a, full if mask is None else full & mask),
                       q, k, v, NAP_PARAMS[name])
  assert_close(got, want, 2e-5)


@pytest.mark.parametrize("layout", sorted(LAYOUTS_ON))
@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("name", sorted(NAP_PARAMS))
@pytest.mark.fast_subset(lambda p: (p["name"], p["dense"], p["layout"]) == ("nap", True, "gpu"))
def test_the_nap_and_non_kernels_in_many_blocks_equal_the_quadratic_path(name, dense, layout,
                                                                         monkeypatch):
  """Blocks of 16 over 40 queries, 45 keys and 40 features: four blocks of query rows, of
  keys and of features each, so every loop and every block's offset (causal, masks) counts.
  NAP's case with a dense mask on the GPU's layout in ``make test``."""
  from normattn_jax.kernels import nap
  monkeypatch.setattr(nap, "blocks_for", lambda *_: nap.Blocks(16, 16, 16, 16))
  n_q, n_k, width = 40, 45, 40
  ks = jax.random.split(jax.random.key(3), 4)
  q, k, v = (jax.random.normal(key, (BATCH, n, HEADS, width))
             for key, n in zip(ks, (n_q, n_k, n_k)))
  query_mask, key_mask = lengths_mask([40, 33], n_q), lengths_mask([45, 29], n_k)
  mask = jax.random.bernoulli(ks[3], 0.8, (BATCH, HEADS, n_q, n_k)) if dense else None
  with platform.tracing_for(LAYOUTS_ON[layout], interpret=True):
    got = out_and_grads(lambda *a: get(name).fused_attention(
        *a, query_mask=query_mask, key_mask=key_mask, causal=True, mask=mask),
        q, k, v, NAP_PARAMS[name])
  full = dense_mask(BATCH, n_q, n_k, query_mask, key_mask, True)
  want = out_and_grads(lambda *a: quadratic(name, *a, full if mask is None else full & mask),
                       q, k, v, NAP_PARAMS[name])
  assert_close(got, want, 2e-5)


@pytest.mark.slow
def test_the_nap_kernel_over_a_models_axis_equals_the_quadratic_path():
  """vmapped as a grid vmaps its models (each with its own gain and bias)."""
  q, k, v = attention_inputs(7, 7)
  stack = lambda x: jnp.stack([x, 2 * x, -x])
  params = {"nap_gain": jnp.array([[0.7, 1.3], [1.0, 1.0], [2.0, 0.5]]),
            "nap_bias": jnp.array([[0.1, -0.2], [0.0, 0.0], [0.3, 0.3]])}
  run = lambda path: out_and_grads(jax.vmap(path), stack(q), stack(k), stack(v), params)
  got = run(lambda *a: get("nap").fused_attention(*a, causal=True))
  want = run(lambda *a: quadratic("nap", *a, dense_mask(BATCH, 7, 7, causal=True)))
  assert_close(got, want, 2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NAP_PARAMS))
def test_the_nap_and_non_kernels_in_bf16_stay_within_the_bf16_tolerances(name):
  """bf16 inputs against the float32 quadratic path: outputs and gradients, as the quadratic
  path in bf16 is held to (``BF16_TOLERANCES``)."""
  q, k, v = attention_inputs(7, 7)
  bf16 = lambda x: x.astype(jnp.bfloat16)
  got = out_and_grads(lambda q, k, v, p: get(name).fused_attention(q, k, v, p, causal=True),
                      bf16(q), bf16(k), bf16(v), NAP_PARAMS[name])
  want = out_and_grads(lambda *a: quadratic(name, *a, dense_mask(BATCH, 7, 7, causal=True)),
                       q, k, v, NAP_PARAMS[name])
  assert relative_error(got[0], want[0]) < BF16_TOLERANCES["output_rms"]
  assert relative_error(got[1], want[1]) < BF16_TOLERANCES["gradient"]


@pytest.mark.slow
def test_a_grid_of_nap_on_its_kernel_trains_as_on_the_quadratic_path(tmp_path):
  """The kernel inside a grid's program (shard_map over the models, vmap, the chunk's scan):
  every model's curves as on the quadratic path, to float rounding over 30 steps."""
  from helpers.sweeps import run
  curves = {}
  for implementation in ("quadratic", "fused"):
    workdir = tmp_path / implementation
    run(tiny_sweep_config(**{"archs": ("nap",), "model.attention_implementation":
                             implementation}), workdir)
    curves[implementation] = dict(np.load(workdir / "metrics.npz"))
  assert set(curves["fused"]) == set(curves["quadratic"])
  for name, want in curves["quadratic"].items():
    np.testing.assert_allclose(curves["fused"][name], want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_the_nap_kernel_refuses_what_it_cannot_take_and_auto_needs_a_measurement():
  from normattn_jax.kernels import nap
  q = jnp.zeros((1, 4, 2, 8))
  with pytest.raises(ValueError, match="eps must be > 0"):
    nap.attention(q, q, q, eps=0.0)
  with pytest.raises(ValueError, match="kind='sum': must be one of"):
    nap.attention(q, q, q, kind="sum", eps=1e-3)
  many = jax.ShapeDtypeStruct((1, nap.MAX_KEYS + 1, 2, 8), jnp.float32)
  with pytest.raises(ValueError, match=f"at most {nap.MAX_KEYS} keys, got {nap.MAX_KEYS + 1}"):
    jax.eval_shape(lambda k: nap.attention(q, k, k, eps=1e-3), many)
  for name in NAP_PARAMS:  # no measurement shipped: "auto" keeps the XLA paths
    assert not fused.takes_fused_path(get(name), "auto", [], jnp.bfloat16, 32, num_keys=4096)


# ----- where the kernels run -----

def rules_file(tmp_path, entries: dict) -> str:
  path = tmp_path / "rules.json"
  path.write_text(json.dumps({"format": 1, "devices": {"Test GPU": entries}}))
  return str(path)


def on_device(monkeypatch, kind):
  monkeypatch.setattr(platform, "target", lambda: platform.Target("cuda", False, kind))


def test_auto_takes_a_kernel_only_where_it_was_measured_faster(tmp_path, monkeypatch):
  fast = {"layout": "mte", "dtype": "float32", "d_model": 32, "ffn_features": 128}
  path = rules_file(tmp_path, {
      "ffn": [dict(fast, speedup=1.3), dict(fast, d_model=128, ffn_features=512, speedup=0.8)],
      "fused_attention": [{"normalization": "softmax", "dtype": "bfloat16", "num_keys": 32,
                           "head_dim": 8, "speedup": 1.2},
                          {"normalization": "softmax", "dtype": "bfloat16", "num_keys": 1024,
                           "head_dim": 8, "speedup": 0.9}]})
  monkeypatch.setenv(rules.ENVIRONMENT, path)
  on_device(monkeypatch, "Test GPU")
  assert takes_kernel("auto", "mte", jnp.float32, 32, 128, dropout_active=False)
  assert not takes_kernel("auto", "mte", jnp.float32, 32, 128, dropout_active=True)
  assert not takes_kernel("auto", "mte", jnp.float32, 128, 512, dropout_active=False)  # slower
  assert not takes_kernel("auto", "bert", jnp.float32, 32, 128, dropout_active=False)  # unmeasured
  assert takes_kernel("pallas", "bert", jnp.float32, 32, 128, dropout_active=False)
  softmax = get("softmax")
  auto = lambda n: fused.takes_fused_path(softmax, "auto", [], jnp.bfloat16, 8, num_keys=n)
  assert auto(32) and not auto(1024)      # measured: faster at 32 keys, slower at 1024
  assert not auto(64) and not auto(512)   # unmeasured: from 512 keys on cuDNN only (none here)
  on_device(monkeypatch, "Another GPU")   # the measurements are the Test GPU's alone
  assert not takes_kernel("auto", "mte", jnp.float32, 32, 128, dropout_active=False)
  assert not auto(32)
  block = TransformerBlock(num_heads=2, ffn_implementation="auto")
  x = jnp.zeros((2, 4, 32))
  params = jax.eval_shape(lambda: block.init(jax.random.key(0), x))
  traced = lambda: str(jax.make_jaxpr(lambda p: block.apply(p, x))(params))
  assert "pallas_call" not in traced()
  on_device(monkeypatch, "Test GPU")
  assert "pallas_call" in traced()


def test_bad_kernel_choices_and_rules_are_refused(tmp_path, monkeypatch):
  with pytest.raises(ValueError, match=r"ffn_implementation='triton': must be one of"):
    TransformerBlock(ffn_implementation="triton")
  with pytest.raises(ValueError, match=r"ffn_implementation='pallas' .*needs dropout_rate=0, "
                                       r"got 0.1"):
    TransformerBlock(ffn_implementation="pallas", dropout_rate=0.1)
  from normattn_jax.sweep import config as config_lib
  c = tiny_sweep_config()
  c.model.ffn_implementation = "pallas"
  c.train.dropout = 0.2
  with pytest.raises(ValueError, match=r"config.model.ffn_implementation='pallas' .*needs "
                                       r"config.train.dropout=0, got 0.2"):
    config_lib.validate(c)
  c.model.ffn_implementation = "fused"
  with pytest.raises(ValueError, match=r"config.model.ffn_implementation='fused': must be one"):
    config_lib.validate(c)
  path = rules_file(tmp_path, {"ffn": [{"layout": "mte", "speedup": 2.0}]})
  monkeypatch.setenv(rules.ENVIRONMENT, path)
  with pytest.raises(ValueError, match=r"ffn entry .* needs \('layout', 'dtype', 'd_model', "
                                       r"'ffn_features'\) and a speedup > 0"):
    rules.load()
  monkeypatch.setenv(rules.ENVIRONMENT, str(tmp_path / "missing.json"))
  with pytest.raises(ValueError, match="NORMATTN_JAX_KERNEL_RULES=.*no such file"):
    rules.load()
  with pytest.raises(ValueError, match=r"platform='gpu': must be one of"):
    with platform.tracing_for("gpu"):
      pass


def test_the_shipped_rules_load_and_merge():
  shipped = rules.check_rules(json.load(open(rules.RULES_FILE)), rules.RULES_FILE)
  measured = {"format": 1, "devices": {"Test GPU": {"ffn": []}}}
  assert set(rules.merged(shipped, measured)["devices"]) == set(shipped["devices"]) | {"Test GPU"}
