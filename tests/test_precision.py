"""The mixed-precision policy (``normattn_jax.precision``): every normalisation on every
implementation it offers computes in bf16 within the stated tolerances of its float32 self,
outputs and gradients, with float32 parameters; one that needs float32 (sparsemax) is refused
by the sweep and pre-training configs, naming the field and the value, and the test shows why.
``make test`` runs a subset that reaches each path (quadratic, fast, fused; a normalisation over
the queries; the refused one); ``make test-all`` all of them."""
import jax
import jax.numpy as jnp
import pytest

from normattn_jax.attention import registry
from normattn_jax.attention.module import MultiHeadAttention
from normattn_jax.precision import (AUTO, BF16_TOLERANCES, DTYPES, check_compute_dtype,
                                    resolve_dtype)
from normattn_jax.sweep import config as config_lib
from normattn_jax.train import kinds
from normattn_jax.cli.exports import implementations
from normattn_jax.sweep.programs import Setup
from normattn_jax.pretrain.train import base_pretrain_config, validate_pretrain_config

CASES = [(name, implementation) for name in registry.names()
         for implementation in implementations(name)]
FAST = {("softmax", "fused"), ("dnas", "fast"), ("ssmax", "fused"), ("sparsemax", "quadratic")}
INPUTS = jax.random.normal(jax.random.key(1), (2, 64, 32))
COTANGENT = jax.random.normal(jax.random.key(2), (2, 64, 32))


def relative(error, reference):
  flat = lambda tree: jnp.concatenate([jnp.ravel(x).astype(jnp.float32)
                                       for x in jax.tree.leaves(tree)])
  return jnp.linalg.norm(flat(error)) / jnp.linalg.norm(flat(reference))


@jax.jit  # one program, not one per operation
def bf16_errors(out16, out32, grad16, grad32):
  """The bf16 output's relative RMS and largest error, and its gradient's relative error."""
  error = out16.astype(jnp.float32) - out32
  return (relative(error, out32), jnp.max(jnp.abs(error)) / jnp.max(jnp.abs(out32)),
          relative(jax.tree.map(jnp.subtract, grad16, grad32), grad32))


def outputs_and_gradient(name, implementation, dtype, params, causal):
  module = MultiHeadAttention(num_heads=4, normalization=name, implementation=implementation,
                              dtype=dtype)

  def loss(p):
    out = module.apply(p, INPUTS, causal=causal)
    return jnp.sum(out.astype(jnp.float32) * COTANGENT), out
  (_, out), grad = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)  # not op by op
  return out, grad


@pytest.mark.fast_subset(lambda params: (params["name"], params["implementation"]) in FAST)
@pytest.mark.parametrize("name,implementation", CASES)
def test_bf16_keeps_the_tolerances_of_float32(name, implementation):
  params = jax.jit(MultiHeadAttention(num_heads=4, normalization=name).init)(jax.random.key(0),
                                                                             INPUTS)
  causal_options = (False, True) if registry.get(name).causal_safe else (False,)
  for causal in causal_options:
    out32, grad32 = outputs_and_gradient(name, implementation, jnp.float32, params, causal)
    out16, grad16 = outputs_and_gradient(name, implementation, jnp.bfloat16, params, causal)
    assert out16.dtype == jnp.bfloat16
    assert all(g.dtype == jnp.float32 for g in jax.tree.leaves(grad16))  # params stay float32
    output_rms, output_max, gradient_error = map(float, bf16_errors(out16, out32, grad16, grad32))
    assert output_rms <= BF16_TOLERANCES["output_rms"], causal
    assert output_max <= BF16_TOLERANCES["output_max"], causal
    if registry.get(name).needs_float32:  # why its configs refuse bf16
      assert gradient_error > 2 * BF16_TOLERANCES["gradient"], causal
    else:
      assert gradient_error <= BF16_TOLERANCES["gradient"], causal


def sweep_config(name, dtype):
  c = config_lib.base_config()
  c.archs = ("mte",)
  c.attention.name = name
  c.model.dtype = dtype
  return c


def test_a_sweep_computes_in_the_configured_dtype_with_float32_parameters():
  c = sweep_config("dnas", "bfloat16")
  config_lib.validate(c)
  model = Setup("mte", c).model()
  assert model.dtype == jnp.bfloat16 and model.param_dtype == jnp.float32
  tokens = jnp.zeros((1, 16), jnp.int32)
  params = jax.jit(model.init)(jax.random.key(0), tokens)  # one program each, not op by op
  assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
  assert jax.jit(model.apply)(params, tokens).dtype == jnp.bfloat16
  assert set(DTYPES) == {"float32", "bfloat16"}


def test_configs_refuse_bf16_for_a_normalisation_that_needs_float32():
  with pytest.raises(ValueError, match=r"config.model.dtype='bfloat16': normalization "
                                       r"'sparsemax' needs float32: its gradient"):
    config_lib.validate(sweep_config("sparsemax", "bfloat16"))
  config_lib.validate(sweep_config("sparsemax", "float32"))
  with pytest.raises(ValueError, match=r"config.model.dtype='float16': must be one of"):
    config_lib.validate(sweep_config("softmax", "float16"))
  p = base_pretrain_config()
  p.model.attention.name, p.model.dtype = "sparsemax", "bfloat16"
  with pytest.raises(ValueError, match=r"config.model.dtype='bfloat16': normalization "
                                       r"'sparsemax' needs float32"):
    validate_pretrain_config(p)
  check_compute_dtype("sparsemax", "float32", "model.dtype")
  check_compute_dtype(registry.AttentionSpec.of("hnas"), "bfloat16", "model.dtype")


def test_auto_is_bf16_on_an_accelerator_where_the_normalisations_allow_it():
  assert resolve_dtype(AUTO, ["nap", registry.AttentionSpec.of("hnas")], "gpu") == "bfloat16"
  assert resolve_dtype(AUTO, [], "tpu") == "bfloat16"  # pooling alone
  assert resolve_dtype(AUTO, ["softmax", "sparsemax"], "gpu") == "float32"
  assert resolve_dtype(AUTO, ["nap"], "cpu") == "float32"
  assert resolve_dtype("float32", ["nap"], "gpu") == "float32"
  c = sweep_config("sparsemax", AUTO)  # never refused: it resolves to float32 there
  config_lib.validate(c)
  assert config_lib.compute_dtype(c) == "float32"
  c = sweep_config("dnas", AUTO)
  recorded = kinds.get("sweep").workdir_config(c, "unused")  # what its workdir records
  assert recorded.model.dtype == config_lib.compute_dtype(c) == resolve_dtype(AUTO, ["dnas"])
  assert c.model.dtype == AUTO  # the config itself unchanged
  assert Setup("mte", c).model().dtype == DTYPES[recorded.model.dtype]


def test_only_the_normalisations_measured_off_in_bf16_need_float32():
  assert [n for n in registry.names() if registry.get(n).needs_float32] == ["sparsemax"]


def test_the_precision_comparison_calls_a_tie_within_the_seeds_spread_the_same_cell():
  """experiments/compare_precision.py's rule: the two bests within the spread, at one learning
  rate or at two that tie (each dtype's mean at the other's rate within the spread)."""
  import importlib.util
  import os
  path = os.path.join(os.path.dirname(__file__), "..", "experiments", "compare_precision.py")
  spec = importlib.util.spec_from_file_location("compare_precision", path)
  cp = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(cp)
  fp32 = {0.1: (0.90, 0.05), 0.01: (0.88, 0.02)}  # lr: (mean, spread)
  assert cp.compare(fp32, {0.1: (0.89, 0.04), 0.01: (0.70, 0.1)})["same"]
  tie = cp.compare(fp32, {0.1: (0.86, 0.03), 0.01: (0.87, 0.02)})
  assert tie["same"] and tie["bfloat16"] == (0.87, 0.01) and tie["spread"] == 0.05
  assert not cp.compare(fp32, {0.1: (0.60, 0.03), 0.01: (0.87, 0.02)})["same"]  # no tie
  assert not cp.compare(fp32, {0.1: (0.80, 0.01), 0.01: (0.70, 0.01)})["same"]  # 0.10 apart
