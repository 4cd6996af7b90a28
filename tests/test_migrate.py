"""Old config.json files read as today's configs of the same runs: the committed pre-training and
fine-tuning workdirs, written when a normalisation's options were flat fields beside its name,
compare equal to today's configs of their commands, so they resume and are not refused."""
import json
import os

import pytest

from normattn_jax.train import kinds
from normattn_jax.train.checkpoint import ABSENT, config_differences, config_json
from normattn_jax.sweep.config import base_config
from normattn_jax.train.migrate import with_current_names
from normattn_jax.pretrain.train import base_pretrain_config

from helpers import REPO, shipped_config


def stored(run):
  with open(os.path.join(REPO, "results", run, "config.json")) as f:
    return json.load(f)


def differences(run, kind, config):
  return config_differences(with_current_names(stored(run), kind), config_json(config),
                            kinds.get(kind).may_differ)


@pytest.mark.parametrize("attention", ["softmax", "dnas", "hnas"])
def test_a_committed_pretraining_is_todays_config(attention):
  assert isinstance(stored(f"albert_tiny/{attention}")["model"]["attention"], str)  # old form
  config = shipped_config("albert_tiny")
  config.model.attention.name = attention
  assert differences(f"albert_tiny/{attention}", "pretraining", config) == []
  config.model.attention.options.hybrid_init = 0.25
  assert differences(f"albert_tiny/{attention}", "pretraining", config) != []


@pytest.mark.parametrize("attention", ["softmax", "dnas", "hnas", "nap"])
def test_a_committed_minilm_fine_tuning_is_todays_config(attention):
  config = shipped_config("finetune_minilm_genre", attention)
  assert differences(f"finetune_minilm_genre/{attention}", "finetuning", config) == []


def test_a_committed_fine_tuning_that_keeps_its_encoder_is_todays_config():
  config = shipped_config("finetune_shakespeare_genre")
  config.encoder.path = "runs/albert_tiny/hnas"
  assert differences("finetune_genre/hnas", "finetuning", config) == []


# The attention module's options, absent from a config.json written before them: off.
OPTIONS_OFF = {"output_gate": None, "qk_norm": None, "differential": False}
# A sweep's compute dtype, attention path and feed-forward path, absent before them: float32,
# "auto", "xla".
SWEEP_COMPUTE = {"dtype": "float32", "attention_implementation": "auto",
                 "ffn_implementation": "xla"}


def test_flat_options_become_the_section_keeping_only_what_differs_from_the_defaults():
  old = {"model": {"attention": "sinkhorn", "hybrid_init": 0.5, "sinkhorn_iters": 5, "dropout": 0}}
  assert with_current_names(old, "pretraining") == {"kind": "pretraining", "model": {
      "attention": {"name": "sinkhorn", "options": {"sinkhorn_iters": 5}}, "dropout": 0,
      **OPTIONS_OFF}}
  assert old["model"]["attention"] == "sinkhorn"  # the stored tree is not changed
  sweep = {"normalization": "", "sweep": {"values": [1]}, "model": {}, "train": {}}
  assert with_current_names(sweep, "sweep") == {
      "kind": "sweep", "attention": {"name": "", "options": {}},
      "sweep": {"grid": [1], "in_program": True},
      "model": dict(OPTIONS_OFF, **SWEEP_COMPUTE),
      "train": {"data_shards": 1, "checkpoint_minutes": 0.0, "flat_adam": False,
                "drop_zero_l2": False}}
  today = with_current_names(sweep, "sweep")
  assert with_current_names(today, "sweep") == today


def test_a_config_from_before_the_kinds_reads_as_its_workdirs_kind():
  """Every config names its kind since the kinds of run were registered; a stored one without
  it is of the kind whose workdir holds it, and compares equal to today's."""
  today = config_json(base_pretrain_config())
  del today["kind"]
  assert config_differences(with_current_names(today, "pretraining"),
                            config_json(base_pretrain_config())) == []


@pytest.mark.parametrize("kind, config", [("sweep", base_config),
                                           ("pretraining", base_pretrain_config)])
def test_a_config_from_before_the_module_options_is_todays_config_with_them_off(kind, config):
  today = config()
  old = config_json(today)
  for key in OPTIONS_OFF:  # as written before the options existed
    del old["model"][key]
  assert config_differences(old, config_json(today), kinds.get(kind).may_differ) == [
      (f"model.{key}", ABSENT, value) for key, value in sorted(OPTIONS_OFF.items())]
  assert config_differences(with_current_names(old, kind), config_json(today),
                            kinds.get(kind).may_differ) == []  # it resumes
  today.model.output_gate = "headwise"
  assert config_differences(with_current_names(old, kind), config_json(today),
                            kinds.get(kind).may_differ) == [("model.output_gate", None, "headwise")]


@pytest.mark.parametrize("run", ["fig3_reduced", "table3_first_token_d64_n128_nap"])
def test_a_committed_sweep_reads_with_the_module_options_off(run):
  assert not set(OPTIONS_OFF) & set(stored(run)["model"])  # written before them
  assert with_current_names(stored(run), "sweep")["model"].items() >= OPTIONS_OFF.items()


def test_a_tree_that_has_the_module_options_keeps_them():
  tree = {"model": {"output_gate": "elementwise", "qk_norm": "rms", "differential": True,
                    "dtype": "bfloat16", "attention_implementation": "fused",
                    "ffn_implementation": "pallas"}}
  for kind in ("sweep", "pretraining"):
    assert with_current_names(tree, kind)["model"] == tree["model"]


def test_a_committed_sweep_reads_as_float32_on_the_auto_path():
  assert (with_current_names(stored("fig3_reduced"), "sweep")["model"].items() >=
          SWEEP_COMPUTE.items())


def test_a_committed_sweep_without_timed_checkpoints_resumes_and_rescores(tmp_path):
  """``train.checkpoint_minutes`` came after the committed sweeps: theirs reads as 0 (off), their
  workdir takes today's config of the run, with any such minutes (they change only when
  checkpoints are written), and re-scores to its summary."""
  from normattn_jax.sweep import artifacts
  from normattn_jax.sweep.train import resummarise
  from normattn_jax.train.checkpoint import check_workdir
  run = "table3_first_token_d64_n128_nap"
  assert "checkpoint_minutes" not in stored(run)["train"]
  for name in ("config.json", "metrics.npz"):
    (tmp_path / name).write_bytes(open(os.path.join(REPO, "results", run, name), "rb").read())
  config = artifacts.read_config(str(tmp_path))
  assert config.train.checkpoint_minutes == 0.0
  config.train.checkpoint_minutes = 5.0
  check_workdir(str(tmp_path), config, "sweep")
  with open(os.path.join(REPO, "results", run, "summary.json")) as f:
    assert resummarise(str(tmp_path)) == json.load(f)
