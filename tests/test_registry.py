"""A normalisation is one registered object: the built-ins are looked up, and two defined here
train through the public API and the sweep CLI: a sparsemax (Martins & Astudillo 2016) with a
per-head parameter, and a tempered softmax, with an option (its temperature) swept over.

This file is also the CLI test's plugin: ``sweep.py --plugins=test_registry`` imports it, which
registers scaled_sparsemax in that process."""
import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.attention import (NORMALIZATIONS, AttentionSpec, HeadParam, MultiHeadAttention,
                                    Normalization, Option, get, names, register, unregister)
from normattn_jax.attention import weights as weights_lib
from normattn_jax.attention.module import fast_is_faster
from normattn_jax.blocks import TransformerBlock

from helpers import REPO, TESTS, subprocess_env
from helpers.sweeps import tiny_registry_grid

KEY = jax.random.key(0)


def sparsemax_weights(logits, mask=None, sparsemax_scale=1.0):
  """The Euclidean projection of ``scale * logits`` onto the simplex, per row: exact zeros."""
  x = logits.astype(jnp.float32) * sparsemax_scale
  if mask is not None:
    x = jnp.where(mask, x, -1e9)  # finite, so a fully masked row stays NaN-free
  z = -jnp.sort(-x, axis=-1)
  k = jnp.arange(1, x.shape[-1] + 1, dtype=x.dtype)
  cumsum = jnp.cumsum(z, axis=-1)
  support = jnp.sum(1 + k * z > cumsum, axis=-1, keepdims=True)
  tau = (jnp.take_along_axis(cumsum, support - 1, axis=-1) - 1) / support
  out = jnp.maximum(x - tau, 0.0)
  if mask is not None:
    out = jnp.where(mask, out, 0.0)
  return out.astype(logits.dtype)


SPARSEMAX = register(Normalization(
    "scaled_sparsemax", sparsemax_weights,
    params=(HeadParam("sparsemax_scale", lambda options: nn.initializers.ones),)))


def positive(value):
  """The temperature's rule."""
  return None if isinstance(value, (int, float)) and value > 0 else "must be a number > 0"


TEMPERED = register(Normalization(
    "tempered", lambda logits, mask, temperature: weights_lib.softmax_weights(
        logits / temperature, mask),
    options=(Option("temperature", 1.0, positive),)))


def test_the_builtins_are_registered():
  assert names()[:6] == ("softmax", "dnas", "hnas", "sinkhorn", "nap", "non")
  assert tuple(NORMALIZATIONS) == names() and "scaled_sparsemax" in NORMALIZATIONS
  assert [get(n).scale_logits for n in ("softmax", "nap")] == [True, False]
  assert not get("non").head_norm and get("nap").head_norm
  assert get("hnas").param_names == ("hybrid_weight",)
  assert get("nap").param_names == ("nap_gain", "nap_bias")
  assert get("sinkhorn").option_names == ("sinkhorn_iters",)
  assert get("hnas").resolve_options() == {"hybrid_init": 0.5}


def test_unknown_names_fail_with_the_registered_ones():
  with pytest.raises(ValueError, match="must be one of .*'scaled_sparsemax'.*got 'gpt'"):
    get("gpt")
  with pytest.raises(ValueError, match="got 'gpt'"):
    MultiHeadAttention(num_heads=2, normalization="gpt")
  from normattn_jax.attention.module import fast_is_faster
  with pytest.raises(ValueError, match="got 'gpt'"):  # no dispatch falls through to NON
    fast_is_faster("gpt", 4, 4, 8, False)


def test_registration_is_checked():
  with pytest.raises(ValueError, match="already registered"):
    register(Normalization("softmax", sparsemax_weights))
  assert register(SPARSEMAX) is SPARSEMAX  # the same object again is fine
  with pytest.raises(ValueError, match="options must be Option objects"):
    register(Normalization("with_alpha", sparsemax_weights, options=("alpha",)))
  with pytest.raises(ValueError, match=r"option names \['mask'\] repeat or clash"):
    register(Normalization("with_alpha", sparsemax_weights, options=(Option("mask", 1),)))
  with pytest.raises(ValueError, match="option temperature must be a number > 0, got 0"):
    register(Normalization("with_alpha", sparsemax_weights,
                           options=(Option("temperature", 0, positive),)))
  with pytest.raises(TypeError):
    register(sparsemax_weights)
  with pytest.raises(ValueError, match="fused must be None or a function .* got 'oops'"):
    register(Normalization("with_alpha", sparsemax_weights, fused="oops"))
  for kernels in (("gpu",), "xla", ("xla",)):  # an unknown kernel, a string, no fused path
    with pytest.raises(ValueError, match=r"fused_auto_kernels must be a tuple of the kernels "
                                         r"\('xla', 'cudnn', 'pallas'\)"):
      register(Normalization("with_alpha", sparsemax_weights, fused_auto_kernels=kernels))
  with pytest.raises(ValueError, match="fused_own_kernel must be False without a fused path"):
    register(Normalization("with_alpha", sparsemax_weights, fused_own_kernel=True))
  assert "with_alpha" not in NORMALIZATIONS
  temporary = register(Normalization("temporary", sparsemax_weights))
  assert register(Normalization("temporary", sparsemax_weights), replace=True) is not temporary
  unregister("temporary")
  assert "temporary" not in NORMALIZATIONS


def test_a_weight_function_of_the_wrong_shape_is_refused_as_it_is_traced():
  """A plugin answering one weight per query (``[..., q, 1]``) was broadcast over the keys."""
  register(Normalization("per_query", lambda logits, mask: jnp.mean(logits, -1, keepdims=True)))
  try:
    x = jnp.ones((1, 9, 8))
    with pytest.raises(ValueError, match=r"normalization 'per_query': its weight function "
                                         r"returned weights of shape \(1, 2, 9, 1\) for logits "
                                         r"of shape \(1, 2, 9, 9\)"):
      jax.jit(MultiHeadAttention(num_heads=2, normalization="per_query").init)(KEY, x)
  finally:
    unregister("per_query")


def test_sparsemax_in_the_module():
  x = jax.random.normal(KEY, (2, 6, 8))
  padding = jnp.array([[True] * 6, [True] * 4 + [False] * 2])
  layer = MultiHeadAttention(num_heads=2, normalization="scaled_sparsemax")
  params = jax.jit(layer.init)(KEY, x)
  assert params["params"]["sparsemax_scale"].shape == (2,)
  sown = jax.jit(lambda params, x, padding=None: layer.apply(
      params, x, padding_mask=padding, sow_weights=True,
      mutable="intermediates")[1]["intermediates"]["attention_weights"][0])
  weights = np.asarray(sown(params, x, padding))
  np.testing.assert_allclose(weights[0].sum(-1), 1.0, atol=1e-5)
  assert np.all(np.asarray(weights[1, :, 4:, :]) == 0)  # padded queries and keys
  assert np.all(np.asarray(weights[1, :, :, 4:]) == 0)
  np.testing.assert_allclose(weights[1, :, :4].sum(-1), 1.0, atol=1e-5)
  hot = np.asarray(sown({"params": dict(params["params"],
                                       sparsemax_scale=jnp.array([1.0, 100.0]))}, x))
  assert np.mean(np.asarray(hot[:, 1]) == 0) > 0.5  # a hot head attends sparsely
  assert not fast_is_faster("scaled_sparsemax", 1 << 15, 1 << 15, 8, False, 1 << 40)
  with pytest.raises(ValueError, match="no fast path"):
    jax.jit(MultiHeadAttention(num_heads=2, normalization="scaled_sparsemax",
                               implementation="fast").init)(KEY, x)


def test_sparsemax_in_a_block_keeps_the_mte_head_norm():
  x = jax.random.normal(KEY, (2, 6, 8))
  block = TransformerBlock(num_heads=2, arch="mte", normalization="scaled_sparsemax")
  params = jax.jit(block.init)(KEY, x)
  attention = params["params"]["attention"]
  assert "head_norm" in attention and attention["sparsemax_scale"].shape == (2,)
  grads = jax.jit(jax.grad(lambda p: jnp.sum(block.apply(p, x) ** 2)))(params)
  assert np.all(np.isfinite(np.asarray(grads["params"]["attention"]["sparsemax_scale"])))


@pytest.mark.slow  # the same sweep as through the command line, below
def test_a_grid_trains_with_sparsemax_through_the_public_api(tmp_path):
  from normattn_jax.sweep.train import run_sweep
  summary = run_sweep(tiny_registry_grid(), str(tmp_path), show_progress=False, tensorboard=False)
  cell, = summary["cells"]
  assert cell["arch"] == "mte"
  assert 0.0 <= cell["metrics"]["train_acc"]["mean"] <= 1.0
  assert np.isfinite(cell["metrics"]["train_loss"]["mean"])


def _cli(tmp_path, *extra):
  """The sweep CLI on the tiny sparsemax grid, as command-line overrides."""
  c = tiny_registry_grid()
  overrides = [f"--config.archs={c.archs!r}", "--config.attention.name=scaled_sparsemax",
               f"--config.learning_rates={tuple(c.learning_rates)!r}",
               f"--config.num_seeds={c.num_seeds}"]
  overrides += [f"--config.task.seq_len={c.task.seq_len}",
                f"--config.model.d_model={c.model.d_model}",
                f"--config.model.num_heads={c.model.num_heads}",
                f"--config.model.num_layers={c.model.num_layers}",
                f"--config.train.num_steps={c.train.num_steps}",
                f"--config.train.eval_every={c.train.eval_every}",
                f"--config.train.batch_size={c.train.batch_size}",
                f"--config.eval.val_batches={c.eval.val_batches}",
                f"--config.eval.case_set_size={c.eval.case_set_size}"]
  env = subprocess_env(TESTS)
  return subprocess.run(
      [sys.executable, "-m", "normattn_jax.cli.sweep", "--config",
       "demo", "--workdir", str(tmp_path / "w"), *overrides,
       *extra], capture_output=True, text=True, cwd=REPO, env=env)


def test_the_sweep_cli_needs_the_plugin_that_registers_sparsemax(tmp_path):
  result = _cli(tmp_path)
  assert result.returncode != 0 and "scaled_sparsemax" in result.stderr
  assert not os.path.exists(tmp_path / "w")


@pytest.mark.slow  # the command's --plugins: test_retrain_arch; a plugin's sweep: the option's
def test_a_grid_trains_with_sparsemax_through_the_sweep_cli(tmp_path):
  result = _cli(tmp_path, "--plugins=test_registry")
  assert result.returncode == 0, result.stderr[-3000:]
  with open(tmp_path / "w" / "summary.json") as f:
    cell, = json.load(f)["cells"]
  assert cell["arch"] == "mte" and np.isfinite(cell["metrics"]["train_loss"]["mean"])


# ----- a normalisation with an option -----

def test_an_option_reaches_the_weights_and_is_checked():
  logits = jax.random.normal(KEY, (2, 3, 5))
  hot = jax.jit(lambda logits: get("tempered").attention_weights(
      logits, None, {}, {"temperature": 0.5}))(logits)
  np.testing.assert_allclose(hot, jax.nn.softmax(2 * logits), atol=1e-6)
  x = jax.random.normal(KEY, (2, 6, 8))
  spec = AttentionSpec("tempered", {"temperature": 0.5})
  layer = MultiHeadAttention(num_heads=2, normalization=spec, implementation="quadratic")
  default = MultiHeadAttention(num_heads=2, normalization="tempered", implementation="quadratic")

  @jax.jit
  def hot_and_cool(x):
    """The weights at temperature 0.5 and at the default, of the same parameters."""
    params = layer.init(KEY, x)
    return tuple(m.apply(params, x, sow_weights=True, mutable="intermediates")[1][
        "intermediates"]["attention_weights"][0] for m in (layer, default))
  hot, cool = hot_and_cool(x)
  np.testing.assert_allclose(hot, jax.nn.softmax(2 * jnp.log(cool), axis=-1), atol=1e-5)
  with pytest.raises(ValueError, match="'tempered': option temperature must be a number > 0"):
    MultiHeadAttention(num_heads=2, normalization=AttentionSpec("tempered", {"temperature": -1}))
  with pytest.raises(ValueError, match="'tempered' has no option 'alpha'"):
    MultiHeadAttention(num_heads=2, normalization=AttentionSpec("tempered", {"alpha": 1.5}))


def test_specs_compare_by_value_and_read_from_a_config():
  from normattn_jax.attention.section import attention_section
  spec = AttentionSpec("tempered", {"temperature": 2.0})
  assert spec == AttentionSpec.of(attention_section("tempered", temperature=2.0))
  assert hash(spec) == hash(AttentionSpec("tempered", (("temperature", 2.0),)))
  assert AttentionSpec.of("tempered") == AttentionSpec("tempered") != spec
  assert str(spec) == "tempered(temperature=2.0)" and spec.to_config()["options"] == {
      "temperature": 2.0}


@pytest.mark.parametrize("name, options, match", [
    ("tempered", {"temperature": -1.0}, "'tempered': option temperature must be a number > 0, "
                                        "got -1.0"),
    ("tempered", {"temprature": 2.0}, "'tempered' has no option 'temprature' \\(given 2.0\\)"),
    ("tempered", {"temperature": "2.0"}, "option temperature must be a number, got '2.0'"),
    ("sinkhorn", {"sinkhorn_iters": True}, "option sinkhorn_iters must be a number, got True"),
    ("tempred", {}, "must be one of .*'tempered'.*got 'tempred'")])
def test_a_spec_is_checked_when_it_is_made(name, options, match):
  """Before any module is built: the name, each option's name, kind (its default's) and rule."""
  with pytest.raises(ValueError, match=match):
    AttentionSpec(name, options)


def test_the_command_line_sets_an_option_and_refuses_a_misspelt_field(monkeypatch):
  from absl import flags as absl_flags
  from normattn_jax.cli import command as cli
  from normattn_jax.sweep.config import validate
  argv = ["prog", "--config.attention.name=tempered", "--config.attention.options.temperature=2.5",
          "--config.archs=('mte',)"]
  monkeypatch.setattr(sys, "argv", argv)  # where the config flag finds its overrides
  parsed = absl_flags.FlagValues()
  holder = cli.define_config_flag("demo", "", parsed)
  parsed(argv)
  config = holder.value
  assert config.attention.to_dict() == {"name": "tempered", "options": {"temperature": 2.5}}
  validate(config)
  config.model.d_modle = 16  # what a misspelt --config.model.d_modle=16 adds
  with pytest.raises(ValueError, match="config.model.d_modle=16: no such field"):
    validate(config)


def test_a_sweep_over_an_option_of_a_plugin_normalisation(tmp_path):
  from normattn_jax.sweep.train import run_sweep
  # the mode task: no case sets to sample and evaluate, a smaller program (the task is not
  # what is swept)
  config = tiny_registry_grid(**{"attention.name": "tempered",
                                 "sweep.name": "attention.options.temperature",
                                 "sweep.grid": (0.5, 4.0), "task.name": "mode_finding",
                                 "task.output": "classes", "task.vocab_size": 4})
  summary = run_sweep(config, str(tmp_path), show_progress=False, tensorboard=False)
  cells = summary["cells"]
  assert [c["params"] for c in cells] == [{"attention.options.temperature": 0.5},
                                          {"attention.options.temperature": 4.0}]
  assert all(np.isfinite(c["metrics"]["train_loss"]["mean"]) for c in cells)
  from normattn_jax.sweep.config import point_config, static_points
  from normattn_jax.sweep.programs import Setup
  assert [Setup("mte", point_config(config, p)).model().normalization
          for p in static_points(config)] == [AttentionSpec("tempered", {"temperature": t})
                                              for t in (0.5, 4.0)]
  config.sweep.grid = (0.5, 0.0)
  with pytest.raises(ValueError, match=r"grid\[1\]=0.0 .*temperature must be a number > 0"):
    run_sweep(config, str(tmp_path / "refused"), show_progress=False)
  assert not os.path.exists(tmp_path / "refused")
