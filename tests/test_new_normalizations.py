"""The seven normalisations of today's wave are registered: each trains in the module and in a
sweep, its learned per-head parameters start at the paper's constant, and softpick's epsilon is
an option set from a config."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.attention import AttentionSpec, MultiHeadAttention, get
from normattn_jax.attention import weights as W
from helpers.sweeps import tiny_registry_grid

NEW = ("sigmoid", "sink", "softpick", "ssmax", "sparsemax", "entmax15", "stickbreaking")
KEY = jax.random.key(0)
X = np.random.default_rng(0).standard_normal((2, 6, 8), np.float32)
# Each name's weights at its initial parameters, from the plain functions.
AT_INIT = {
    "sigmoid": lambda l, m: W.sigmoid_weights(l, None, m),
    "sink": lambda l, m: W.sink_weights(l, 0.0, m),
    "softpick": lambda l, m: W.softpick_weights(l, m, 1e-6),
    "ssmax": lambda l, m: W.ssmax_weights(l, 1.0, m),
    "sparsemax": W.sparsemax_weights,
    "entmax15": W.entmax15_weights,
    "stickbreaking": W.stickbreaking_weights,
}


def sown_weights(layer, params, **kwargs):
  _, state = layer.apply(params, X, sow_weights=True, mutable="intermediates", **kwargs)
  return state["intermediates"]["attention_weights"][0]


def logits_of(params):
  p = params["params"]
  q = jnp.einsum("bnf,fhd->bhnd", X, p["query"]["kernel"]) + p["query"]["bias"][:, None]
  k = jnp.einsum("bnf,fhd->bhnd", X, p["key"]["kernel"]) + p["key"]["bias"][:, None]
  return jnp.einsum("bhqd,bhkd->bhqk", q / jnp.sqrt(4.0), k)


# the ones with learned per-head constants; the others in the module (no parameter of their
# own): test_module.py::test_every_normalization_runs
@pytest.mark.parametrize("name", NEW)
@pytest.mark.fast_subset(lambda p: p["name"] in ("sigmoid", "sink", "ssmax"))
def test_the_module_starts_at_the_papers_constants_and_trains(name):
  layer = MultiHeadAttention(num_heads=2, normalization=name)
  params = layer.init(KEY, X)  # op by op: the names share their projections' initialisers
  causal = np.tril(np.ones((6, 6), bool))

  def weights_and_gradients(p):  # one program (op by op, each operation would compile alone)
    return (sown_weights(layer, p, mask=causal), AT_INIT[name](logits_of(p), causal),
            jax.grad(lambda q: jnp.sum(layer.apply(q, X, mask=causal) ** 2))(p))

  weights, at_init, grads = jax.jit(weights_and_gradients)(params)
  np.testing.assert_allclose(weights, at_init, atol=1e-5)
  assert np.all(np.asarray(weights)[..., ~causal] == 0)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  for param in get(name).param_names:  # the learned constants move
    assert np.any(np.asarray(grads["params"][param]) != 0), param


def test_softpick_epsilon_is_an_option():
  assert get("softpick").resolve_options() == {"softpick_eps": 1e-6}
  layer = MultiHeadAttention(num_heads=2, normalization=AttentionSpec(
      "softpick", {"softpick_eps": 10.0}))
  params = layer.init(KEY, X)
  np.testing.assert_allclose(*jax.jit(lambda p: (  # one program
      sown_weights(layer, p), W.softpick_weights(logits_of(p), None, 10.0)))(params), atol=1e-6)
  with pytest.raises(ValueError, match="softpick_eps must be >= 0, got -1"):
    MultiHeadAttention(num_heads=2, normalization=AttentionSpec("softpick", {"softpick_eps": -1}))


# A registered normalisation's sweep is tested fast by test_registry (sparsemax, from the command
# line); each of these repeats that path with another normalisation.
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) for n in NEW])
def test_a_sweep_trains_it(name, tmp_path):
  from normattn_jax.sweep.train import run_sweep
  summary = run_sweep(tiny_registry_grid(**{"attention.name": name}), str(tmp_path),
                      show_progress=False, tensorboard=False)
  cell, = summary["cells"]
  assert cell["diverged"] == 0 and np.isfinite(cell["metrics"]["train_loss"]["mean"])
