"""The pre-training run: config validation, resume equality, summary and files."""
import os

import jax
import numpy as np
import pytest

from normattn_jax.pretrain import train as pretrain
from normattn_jax.sweep.config import get_field
from normattn_jax.train.driver import Budget, Interrupted
from normattn_jax.pretrain.train import run_pretraining, validate_pretrain_config

from helpers.pretraining import (FAKE_VOCAB, VOCAB, RandomExamples, read_history,
                                 tiny_pretrain_config)


@pytest.fixture
def random_data(monkeypatch):
  splits = {"train": RandomExamples(64, 0), "validation": RandomExamples(16, 1)}
  monkeypatch.setattr(pretrain, "load_data",
                      lambda c, workdir: (FAKE_VOCAB, splits))


@pytest.mark.slow  # also checked, from a damaged checkpoint, by test_workdir
def test_resumed_run_equals_uninterrupted(tmp_path, random_data):
  config = tiny_pretrain_config("hnas")
  whole = run_pretraining(config, str(tmp_path / "whole"), show_progress=False)
  resumed_dir = str(tmp_path / "resumed")
  with pytest.raises(Interrupted):
    # the last save: step 2
    run_pretraining(config, resumed_dir, budget=Budget(chunks=3), show_progress=False)
  resumed = run_pretraining(config, resumed_dir, show_progress=False)
  for key in ("mlm_accuracy", "sop_accuracy", "mlm_loss", "sop_loss", "hybrid_weights"):
    np.testing.assert_allclose(resumed[key], whole[key], rtol=1e-6, err_msg=key)
  assert read_history(resumed_dir) == read_history(str(tmp_path / "whole"))
  assert [r["step"] for r in read_history(resumed_dir) if r["split"] == "validation"] == [3, 6]


def test_summary_and_files(tmp_path, random_data):
  summary = run_pretraining(tiny_pretrain_config("hnas"), str(tmp_path), show_progress=False)
  for name in ("config.json", "summary.json", "history.jsonl", "tensorboard", "checkpoints"):
    assert os.path.exists(tmp_path / name), name
  assert 0 <= summary["mlm_accuracy"] <= 1 and 0 <= summary["sop_accuracy"] <= 1
  assert len(summary["hybrid_weights"]) == 2
  assert np.asarray(summary["hybrid_weights_per_head"]).shape == (2, 2)
  assert summary["eval_examples"] == 8
  train_rows = [r for r in read_history(str(tmp_path)) if r["split"] == "train"]
  assert [r["step"] for r in train_rows] == list(range(1, 7))
  assert train_rows[0]["learning_rate"] == 0.0  # ALBERT's warm-up starts at 0
  assert all(np.isfinite(r["loss"]) for r in train_rows)


def test_training_lowers_the_loss_on_a_fixed_batch(tmp_path, monkeypatch):
  one = RandomExamples(4, 0)  # four examples, seen every step: MLM must memorise them
  monkeypatch.setattr(pretrain, "load_data", lambda c, workdir: (
      FAKE_VOCAB, {"train": one, "validation": one}))
  config = tiny_pretrain_config()
  config.model.num_hidden_layers = 1  # one layer memorises four examples, and compiles sooner
  config.train.update(num_steps=60, eval_every=60, checkpoint_every=0, learning_rate=0.1)
  summary = run_pretraining(config, str(tmp_path), show_progress=False, tensorboard=False)
  rows = [r for r in read_history(str(tmp_path)) if r["split"] == "train"]
  assert rows[-1]["mlm_loss"] < 0.5 * rows[0]["mlm_loss"]
  assert summary["mlm_accuracy"] > 0.25  # chance: 1 / 40


@pytest.mark.parametrize("field, value, match", [
    ("model.attention.name", "cosine", "model.attention.name"),
    ("model.attention.options", {"hybrid_init": 0.5}, "softmax' has no option 'hybrid_init'"),
    ("model.num_attention_heads", 3, "model.num_attention_heads"),
    ("model.dtype", "float16", "model.dtype"),
    ("data.corpus", "books", "data.corpus"),
    ("data.max_seq_length", 32, "data.max_seq_length"),
    ("data.masked_lm_prob", 1.5, "data.masked_lm_prob"),
    ("train.warmup_steps", 6, "train.warmup_steps"),
    ("train.batch_size", 0, "train.batch_size"),
    ("train.learning_rate", 0.0, "train.learning_rate"),
    ("train.learning_rate", float("inf"), r"train.learning_rate=inf: must be a finite number"),
    ("train.weight_decay", float("nan"), r"train.weight_decay=nan: must be a finite number"),
    ("train.clip_norm", float("inf"), r"train.clip_norm=inf: must be a finite number"),
    ("model.layer_norm_eps", float("inf"), r"model.layer_norm_eps=inf: must be a finite"),
    ("model.dropout", float("nan"), r"model.dropout=nan: must be a finite number"),
])
def test_bad_config_names_the_field_before_anything_is_written(tmp_path, field, value, match):
  config = tiny_pretrain_config()
  section, _, name = field.rpartition(".")
  get_field(config, section)[name] = value
  with pytest.raises(ValueError, match=match):
    validate_pretrain_config(config)
  with pytest.raises(ValueError, match=match):
    run_pretraining(config, str(tmp_path / "run"), show_progress=False)
  assert not os.path.exists(tmp_path / "run")


def test_files_corpus_needs_existing_files():
  config = tiny_pretrain_config()
  config.data.corpus = "files"
  with pytest.raises(ValueError, match="data.files"):
    validate_pretrain_config(config)
  config.data.files = ("/no/such/file.txt",)
  with pytest.raises(ValueError, match="no such file"):
    validate_pretrain_config(config)


def test_batch_is_sharded_over_devices(random_data):
  trainer = pretrain.Trainer(tiny_pretrain_config(), VOCAB)
  batch = trainer.global_batch(RandomExamples(8, 0), 0, 4, seed=0)
  assert batch["input_ids"].sharding.spec == jax.sharding.PartitionSpec("data")
