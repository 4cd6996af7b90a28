"""Old config.json files read as today's configs of the same runs: the committed pre-training and
fine-tuning workdirs, written when a normalisation's options were flat fields beside its name,
compare equal to today's configs of their commands, so they resume and are not refused."""
import importlib.util
import json
import os

import pytest

from normattn_jax.train.checkpoint import MAY_DIFFER, config_differences, config_json
from normattn_jax.train.migrate import with_current_names

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def get_config(name, *arg):
  spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "configs", name + ".py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(*arg)


def stored(run):
  with open(os.path.join(REPO, "results", run, "config.json")) as f:
    return json.load(f)


def differences(run, kind, config):
  return config_differences(with_current_names(stored(run), kind), config_json(config),
                            MAY_DIFFER[kind])


@pytest.mark.parametrize("attention", ["softmax", "dnas", "hnas"])
def test_a_committed_pretraining_is_todays_config(attention):
  assert isinstance(stored(f"albert_tiny/{attention}")["model"]["attention"], str)  # old form
  config = get_config("albert_tiny")
  config.model.attention.name = attention
  assert differences(f"albert_tiny/{attention}", "pretraining", config) == []
  config.model.attention.options.hybrid_init = 0.25
  assert differences(f"albert_tiny/{attention}", "pretraining", config) != []


@pytest.mark.parametrize("attention", ["softmax", "dnas", "hnas", "nap"])
def test_a_committed_minilm_fine_tuning_is_todays_config(attention):
  config = get_config("finetune_minilm_genre", attention)
  assert differences(f"finetune_minilm_genre/{attention}", "finetuning", config) == []


def test_a_committed_fine_tuning_that_keeps_its_encoder_is_todays_config():
  config = get_config("finetune_shakespeare_genre")
  config.encoder.path = "runs/albert_tiny/hnas"
  assert differences("finetune_genre/hnas", "finetuning", config) == []


def test_flat_options_become_the_section_keeping_only_what_differs_from_the_defaults():
  old = {"model": {"attention": "sinkhorn", "hybrid_init": 0.5, "sinkhorn_iters": 5, "dropout": 0}}
  assert with_current_names(old, "pretraining") == {"model": {
      "attention": {"name": "sinkhorn", "options": {"sinkhorn_iters": 5}}, "dropout": 0}}
  assert old["model"]["attention"] == "sinkhorn"  # the stored tree is not changed
  sweep = {"normalization": "", "sweep": {"values": [1]}, "model": {}, "train": {}}
  assert with_current_names(sweep, "sweep") == {
      "attention": {"name": "", "options": {}}, "sweep": {"grid": [1]}, "model": {}, "train": {}}
  today = with_current_names(sweep, "sweep")
  assert with_current_names(today, "sweep") == today
