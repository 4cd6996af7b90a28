"""The GPT-2-style causal LM of Brody et al.'s Table 1: causality, the LayerNorm before attention,
the captured keys, training on the grid engine (resume, seeds alone and together), the run's
config, and the unselectable-key counts on float32 keys."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.configs import unselectable_lm
from normattn_jax.analysis import causal_lm_keys as lm_keys
from normattn_jax.analysis.unselectable import unselectable
from normattn_jax.models.causal_lm import CausalLM, capture_attention_inputs, init_params
from normattn_jax.norms import normalize
from normattn_jax.train.checkpoint import WorkdirError, check_workdir
from normattn_jax.train.driver import Budget, Interrupted
from normattn_jax.train.run_log import RunLog

from helpers import REPO
from helpers.causal_lm import LENGTH, tiny_causal_lm_config

VOCAB = 13
STREAM = np.tile(np.arange(VOCAB, dtype=np.int32), 40)  # a predictable text


def train_variant(c, grid, workdir, name="without_scaling", budget=None):
  """One variant's grid trained (or resumed) in ``workdir`` as ``run`` trains it."""
  workdir.mkdir(exist_ok=True)
  with RunLog(str(workdir), tensorboard=False, progress=False) as run_log:
    return lm_keys.train_variant(c, name, grid, str(workdir), run_log, budget, log=lambda _: None)


def grid_of(c, name="without_scaling"):
  return lm_keys.build_grid(c, lm_keys.build_model(c, VOCAB, lm_keys.VARIANTS[name]), STREAM)


@pytest.fixture(scope="module")
def model_and_params():
  model = CausalLM(vocab_size=VOCAB, max_len=LENGTH, pre_attention_norm_kind="no_scaling")
  return model, jax.jit(lambda key: init_params(model, key))(jax.random.key(0))


def test_output_at_t_does_not_depend_on_later_tokens(model_and_params):
  model, params = model_and_params
  tokens = jax.random.randint(jax.random.key(1), (2, LENGTH), 0, VOCAB)
  changed = tokens.at[:, 7:].set((tokens[:, 7:] + 5) % VOCAB)
  apply = jax.jit(lambda t: model.apply({"params": params}, t))  # one program for both
  logits, logits_changed = apply(tokens), apply(changed)
  np.testing.assert_allclose(logits[:, :7], logits_changed[:, :7], atol=1e-6)
  assert float(jnp.max(jnp.abs(logits[:, 7:] - logits_changed[:, 7:]))) > 1e-4


def test_the_layer_norm_before_attention_is_the_configured_kind(model_and_params):
  without, params = model_and_params
  standard = without.clone(pre_attention_norm_kind="standard")
  tokens = jax.random.randint(jax.random.key(2), (3, LENGTH), 0, VOCAB)
  # Same parameter tree (that LayerNorm has no gain or bias): only the normalisation differs.
  assert (jax.tree.structure(jax.eval_shape(lambda: init_params(standard, jax.random.key(0))))
          == jax.tree.structure(params))
  capture = lambda model: jax.jit(  # one program each (op by op, each operation compiles)
      lambda p: capture_attention_inputs(model, {"params": p}, tokens))(params)
  got_without, got_standard = capture(without), capture(standard)
  # Layer 1 sees the same embeddings in both models.
  np.testing.assert_allclose(got_without["norm_inputs"][0], got_standard["norm_inputs"][0])
  x = got_without["norm_inputs"][0]
  centred = x - x.mean(-1, keepdims=True)
  np.testing.assert_allclose(got_without["attention_inputs"][0], centred, atol=1e-7)
  rms = jnp.sqrt(jnp.mean(centred ** 2, -1, keepdims=True) + without.layer_norm_epsilon)
  np.testing.assert_allclose(got_standard["attention_inputs"][0], centred / rms, rtol=1e-5,
                             atol=1e-6)
  by_kind = jax.jit(normalize, static_argnums=(1, 2))  # op by op, each operation compiles
  for kind, got in (("no_scaling", got_without), ("standard", got_standard)):
    np.testing.assert_allclose(got["attention_inputs"],
                               by_kind(got["norm_inputs"], kind, without.layer_norm_epsilon),
                               rtol=1e-5, atol=1e-6)
  # Scaling puts every key near the sphere of radius sqrt(d) (exactly on it but for epsilon);
  # projection alone leaves their lengths spread.
  lengths_spread = jax.jit(lambda v: jnp.std(jnp.linalg.norm(v, axis=-1)) / jnp.mean(
      jnp.linalg.norm(v, axis=-1)))
  spread = lambda v: float(lengths_spread(v))
  assert spread(got_standard["attention_inputs"]) < 0.01 < 0.1 < spread(
      got_without["attention_inputs"])


def test_key_capture_shape(model_and_params):
  model, params = model_and_params
  tokens = jnp.zeros((3, 5), jnp.int32)
  got = jax.eval_shape(  # the shapes, traced without compiling
      lambda p: capture_attention_inputs(model, {"params": p}, tokens), params)
  assert set(got) == {"norm_inputs", "attention_inputs"}
  for value in got.values():
    assert value.shape == (4, 3, 5, 8)  # [layers, batch, n, d]


def test_bad_fields_raise_naming_them():
  with pytest.raises(ValueError, match="pre_attention_norm_kind"):
    CausalLM(vocab_size=VOCAB, max_len=LENGTH, pre_attention_norm_kind="rms")
  with pytest.raises(ValueError, match="num_heads"):
    CausalLM(vocab_size=VOCAB, max_len=LENGTH, num_heads=3)
  model = CausalLM(vocab_size=VOCAB, max_len=4)
  with pytest.raises(ValueError, match="max_len"):
    model.init(jax.random.key(0), jnp.zeros((1, 5), jnp.int32))
  c = unselectable_lm.get_config()
  c.train.log_every = 7
  with pytest.raises(ValueError, match="train.log_every=7"):
    lm_keys.validate_config(c)
  c = unselectable_lm.get_config()
  c.data.corpus = "books"
  with pytest.raises(ValueError, match="data.corpus='books'"):
    lm_keys.validate_config(c)


def test_the_fields_a_resumed_run_may_change_exist():
  from normattn_jax.train import kinds
  from normattn_jax.train.checkpoint import config_differences, config_json

  every_field = {field for field, _, _ in config_differences(
      {}, config_json(unselectable_lm.get_config()))}
  assert set(kinds.get("causal_lm").may_differ) <= every_field
  assert "train.log_every" not in kinds.get("causal_lm").may_differ  # it numbers the checkpoints


@pytest.fixture(scope="module")
def variant_grids():
  """A config of two chunks and both variants' grids, compiled once for the tests that train
  them."""
  c = tiny_causal_lm_config(num_steps=40, log_every=20, checkpoint_every=20)
  return c, {name: grid_of(c, name) for name in lm_keys.VARIANTS}


def test_a_tiny_training_lowers_the_loss_of_both_variants(tmp_path, variant_grids):
  c, grids = variant_grids
  initial = {name: lm_keys.initial_states(c, grid) for name, grid in grids.items()}
  # The seeds differ, the variants of one seed start alike.
  first = initial["with_scaling"].params["token_embedding"]["embedding"]
  assert float(np.max(np.abs(first[0] - first[1]))) > 0
  np.testing.assert_array_equal(first, initial["without_scaling"].params["token_embedding"]
                                ["embedding"])
  for name, grid in grids.items():
    run = train_variant(c, grid, tmp_path / name, name)
    losses = run.metrics["train_loss"]
    assert losses.shape == (2, 2)  # [chunks, seeds]
    assert np.all(losses[1] < losses[0] - 0.3)
    assert not np.any(run.state.diverged) and not np.any(run.metrics["diverged"])
    assert np.all(run.state.step == 40)


def test_an_interrupted_variant_resumes_to_the_numbers_of_an_uninterrupted_one(tmp_path,
                                                                             variant_grids):
  c, grids = variant_grids
  grid = grids["without_scaling"]  # compiled once, trained three times
  reference = train_variant(c, grid, tmp_path / "whole")
  with pytest.raises(Interrupted, match="after 1 of 2"):
    train_variant(c, grid, tmp_path / "parts", budget=Budget(1))
  resumed = train_variant(c, grid, tmp_path / "parts")
  for name in ("train_loss", "diverged"):
    np.testing.assert_array_equal(resumed.metrics[name], reference.metrics[name])
  jax.tree.map(np.testing.assert_array_equal, resumed.state.params, reference.state.params)
  history = [(tmp_path / folder / "history.jsonl").read_text() for folder in ("whole", "parts")]
  assert history[0] == history[1] and len(history[0].splitlines()) == 2


@pytest.mark.slow  # two grids; the engine's own tests cover the path
@pytest.mark.usefixtures("fusion_emitters")
def test_a_seed_trains_alike_alone_and_beside_other_seeds(tmp_path):
  """The models axis is the seeds: seed 0 of a grid of 2 is the grid of seed 0 alone."""
  runs = [train_variant(c, grid_of(c), tmp_path / str(c.train.seeds))
          for c in (tiny_causal_lm_config(seeds=1, models_per_vmap=1, num_steps=2, warmup_steps=1),
                    tiny_causal_lm_config(seeds=2, models_per_vmap=1, num_steps=2, warmup_steps=1))]
  np.testing.assert_array_equal(runs[0].metrics["train_loss"][:, 0],
                                runs[1].metrics["train_loss"][:, 0])
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a[0], b[0]), runs[0].state.params,
               runs[1].state.params)


def test_the_committed_run_resumes_under_todays_config():
  """``results/unselectable_lm/config.json`` (from before ``train.models_per_vmap``) reads as
  today's ``normattn_jax/configs/unselectable_lm.py``."""
  workdir = os.path.join(REPO, "results", "unselectable_lm")
  c = unselectable_lm.get_config()
  lm_keys.validate_config(c)
  check_workdir(workdir, c, lm_keys.KIND)
  with open(os.path.join(workdir, "config.json")) as f:
    assert "models_per_vmap" not in json.load(f)["train"]
  c.train.models_per_vmap = 2
  with pytest.raises(WorkdirError, match="train.models_per_vmap was 0, now 2"):
    check_workdir(workdir, c, lm_keys.KIND)


def test_a_field_the_run_lacks_or_misses_is_refused():
  c = unselectable_lm.get_config()
  c.train.sedes = 3
  with pytest.raises(ValueError, match=r"config.train.sedes=3: no such field"):
    lm_keys.validate_config(c)
  c = unselectable_lm.get_config()
  del c.analysis["tolerance"]
  with pytest.raises(ValueError, match=r"config.analysis.tolerance=None: missing"):
    lm_keys.validate_config(c)


def test_a_bad_budget_is_refused_before_the_workdir_is_written(tmp_path):
  with pytest.raises(ValueError, match="minutes must be >= 0, got -1"):
    lm_keys.run(tiny_causal_lm_config(), str(tmp_path / "run"), budget=Budget(minutes=-1))
  c = tiny_causal_lm_config()
  c.kind = "sweep"
  with pytest.raises(ValueError, match="config.kind='sweep'"):
    lm_keys.run(c, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


def test_heldout_windows_are_disjoint_and_spread():
  stream = np.arange(100, dtype=np.int32)
  windows = lm_keys.heldout_windows(stream, 10, 4)
  np.testing.assert_array_equal(windows[:, 0], [0, 20, 50, 70])
  assert len(np.unique(windows)) == windows.size
  with pytest.raises(ValueError, match="11 asked for"):
    lm_keys.heldout_windows(stream, 10, 11)


def test_unselectable_counts_on_float32_projected_keys():
  rng = np.random.default_rng(0)
  x = (0.03 * rng.standard_normal((80, 8))).astype(np.float32)
  centred = x - x.mean(-1, keepdims=True)             # in float32: ~1e-9 off the subspace
  exact = x.astype(np.float64) - x.astype(np.float64).mean(-1, keepdims=True)
  want = unselectable(exact, tol=1e-6)
  assert want.any()
  # Scale-free, and float32 rounding does not make hull points selectable.
  np.testing.assert_array_equal(unselectable(centred, tol=1e-6), want)
  np.testing.assert_array_equal(unselectable(1000.0 * exact, tol=1e-6), want)
  # Projection only adds unselectable points; scaling to a sphere removes them all.
  assert np.all(want[unselectable(x)])
  counts = lm_keys.unselectable_counts(np.stack([centred, centred / np.linalg.norm(
      centred, axis=-1, keepdims=True)])[:, None], tol=1e-6)
  assert counts.shape == (2, 1)
  assert counts[0, 0] == want.sum() and counts[1, 0] == 0


def test_layer_statistics_keep_the_per_window_counts_they_come_from():
  stats = lm_keys.layer_statistics(np.array([[2, 1], [0, 0]]), vectors=4)
  assert stats["mean_percent"] == pytest.approx([37.5, 0.0])
  assert stats["std_percent"] == pytest.approx([12.5, 0.0])
  assert stats["unselectable_per_window"] == [[2, 1], [0, 0]]
  assert stats["vectors_per_window"] == 4
  recomputed = 100 * np.array(stats["unselectable_per_window"]) / stats["vectors_per_window"]
  assert recomputed.mean(-1) == pytest.approx(stats["mean_percent"])


def test_the_analysis_of_a_model_keeps_its_per_window_counts(model_and_params):
  model, params = model_and_params
  windows = np.asarray(jax.random.randint(jax.random.key(2), (3, LENGTH), 0, VOCAB))
  stats = lm_keys.analyze_model(model, params, windows, tol=1e-6)["attention_inputs"]
  counts = np.array(stats["unselectable_per_window"])
  assert counts.shape == (model.num_layers, 3) and stats["vectors_per_window"] == LENGTH
  np.testing.assert_allclose(100 * counts.mean(-1) / LENGTH, stats["mean_percent"])


def test_heldout_starts_are_the_windows_offsets():
  stream = np.arange(100, dtype=np.int32)
  np.testing.assert_array_equal(lm_keys.heldout_starts(100, 10, 4),
                                lm_keys.heldout_windows(stream, 10, 4)[:, 0])


@pytest.mark.parametrize("field, value", [
    ("train.learning_rate", float("inf")), ("train.weight_decay", float("nan")),
    ("analysis.tolerance", float("inf")), ("model.init_std", float("nan")),
])
def test_non_finite_floats_are_refused_naming_the_field(field, value):
  c = unselectable_lm.get_config()
  section, name = field.split(".")
  c[section][name] = value
  with pytest.raises(ValueError, match=f"config.{field}={value!r}: must be a finite number"):
    lm_keys.validate_config(c)
