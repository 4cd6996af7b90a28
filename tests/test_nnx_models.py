"""The six architectures' models as NNX modules (normattn_jax.nnx.from_linen)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from normattn_jax.attention.module_spec import AttentionModuleSpec
from normattn_jax.models.sequence import SequenceModel
from normattn_jax.nnx import from_linen
from normattn_jax.sweep.config import PAPER_ARCHS

TOKENS = jax.random.randint(jax.random.key(0), (3, 8), 0, 16)
MASK = jnp.arange(8) < jnp.array([[8], [5], [3]])


def small_model(arch, **kwargs):
  return SequenceModel(vocab_size=16, max_len=8, d_model=16, num_layers=2, num_heads=2,
                       arch=arch, **kwargs)


@pytest.mark.parametrize("arch", PAPER_ARCHS)
@pytest.mark.fast_subset(  # the bridge is the same for every arch (it runs the Linen code, whose
    lambda p: p["arch"] in ("bert", "sum"))  # archs test_blocks checks): attention and pooling
def test_an_nnx_model_gives_the_linen_models_outputs_from_its_parameters(arch):
  linen_model = small_model(arch)
  model = from_linen(linen_model, TOKENS, rngs=nnx.Rngs(1), mask=MASK)
  params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  expected = linen_model.apply({"params": params}, TOKENS, mask=MASK)
  np.testing.assert_array_equal(model(TOKENS, mask=MASK), expected)
  assert set(params) == set(linen_model.init(jax.random.key(1), TOKENS)["params"])


@pytest.mark.slow  # the bridge runs the Linen code: test_blocks checks the first-token path
def test_an_nnx_first_token_model_gives_the_logits_of_every_token_computed():
  linen_model = small_model("nap", output="first")
  model = from_linen(linen_model, TOKENS, rngs=nnx.Rngs(3), mask=MASK)
  params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  every_token = linen_model.clone(all_tokens=True).apply({"params": params}, TOKENS, mask=MASK)
  np.testing.assert_allclose(model(TOKENS, mask=MASK), every_token, atol=1e-5, rtol=1e-5)


def test_an_nnx_model_with_module_options_trains_with_an_nnx_optimizer():
  options = AttentionModuleSpec(output_gate="headwise", qk_norm="rms")
  model = from_linen(small_model("mte", normalization="sigmoid", attention_module=options),
                     TOKENS, rngs=nnx.Rngs(2))
  optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
  targets = jnp.zeros((3,), jnp.int32)

  def loss_fn(m):
    return optax.softmax_cross_entropy_with_integer_labels(m(TOKENS), targets).mean()

  @nnx.jit
  def step(m, opt):
    loss, grads = nnx.value_and_grad(loss_fn)(m)
    opt.update(m, grads)
    return loss

  losses = [float(step(model, optimizer)) for _ in range(20)]
  assert all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0]
