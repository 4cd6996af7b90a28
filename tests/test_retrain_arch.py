"""experiments/retrain_arch.py: one arch of a finished sweep trained again and merged back."""
import importlib.util
import json
import os

import numpy as np
import pytest

from normattn_jax.train import artifacts, base_config
from normattn_jax.train.sweep import run_sweep

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_script():
  spec = importlib.util.spec_from_file_location(
      "retrain_arch", os.path.join(REPO, "experiments", "retrain_arch.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


retrain = _load_script()


def tiny_config():
  c = base_config()
  c.archs = ("bert", "sum")
  c.task.name = "mode_finding"  # no case metrics: a smaller program to compile
  c.task.vocab_size = 4
  c.task.output = "classes"
  c.learning_rates = (0.003, 0.001)
  c.num_seeds = 2
  # A static point (grids named "<arch>[model.num_layers=0]"); no blocks, embeddings and output
  # only: the programs compile in seconds, and BERT still trains with its warm-up and clipping.
  c.sweep.name = "model.num_layers"
  c.sweep.grid = (0,)
  c.task.seq_len = 8
  c.model.d_model = 8
  c.model.num_heads = 2
  c.train.num_steps = 20
  c.train.eval_every = 10
  c.train.batch_size = 4
  c.train.checkpoint_every = 1
  c.eval.val_batches = 2
  c.eval.case_set_size = 4
  return c


def metrics(workdir):
  with np.load(os.path.join(workdir, artifacts.METRICS)) as data:
    return {name: data[name] for name in data.files}


def read_text(path):
  with open(path) as f:
    return f.read()


def store_as_older_run(workdir):
  """config.json as a run stored before train.models_per_vmap and sweep.grid existed."""
  path = os.path.join(workdir, "config.json")
  with open(path) as f:
    tree = json.load(f)
  del tree["train"]["models_per_vmap"]
  tree["sweep"]["values"] = tree["sweep"].pop("grid")
  with open(path, "w") as f:
    json.dump(tree, f)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("sweep"))
  run_sweep(tiny_config(), workdir, show_progress=False, tensorboard=False)
  store_as_older_run(workdir)
  return workdir, metrics(workdir), read_text(os.path.join(workdir, artifacts.SUMMARY))


def test_retraining_with_unchanged_code_reproduces_the_run(finished):
  workdir, stored, summary = finished
  retrain.retrain_arch(workdir, "bert", show_progress=False)
  now = metrics(workdir)
  assert list(now) == list(stored)  # the same arrays, in the same order
  for name in stored:
    np.testing.assert_array_equal(now[name], stored[name], err_msg=name)
  assert read_text(os.path.join(workdir, artifacts.SUMMARY)) == summary
  sub = retrain.sub_workdir(workdir, "bert")
  with open(os.path.join(sub, "config.json")) as f:
    sub_config = json.load(f)
  assert sub_config["archs"] == ["bert"] and sub_config["train"]["models_per_vmap"] == 0
  assert os.path.exists(os.path.join(sub, "versions.json"))
  assert not os.path.exists(os.path.join(sub, "checkpoints"))
  with open(os.path.join(workdir, retrain.RECORD)) as f:
    entry = json.load(f)["bert"]
  assert entry["versions"] == "retrain_bert/versions.json"
  assert entry["grids"] == ["bert[model.num_layers=0]"]


def test_retraining_restores_the_arch_and_keeps_the_others(finished):
  workdir, stored, summary = finished
  retrain.retrain_arch(workdir, "bert", show_progress=False)  # trained: the sub-run has finished
  damaged = {name: np.zeros_like(array) if name.startswith("bert[") else array
             for name, array in stored.items()}
  np.savez_compressed(os.path.join(workdir, artifacts.METRICS), **damaged)
  summary_path = os.path.join(workdir, artifacts.SUMMARY)
  with open(summary_path, "w") as f:
    f.write("{}")
  retrain.retrain_arch(workdir, "bert", show_progress=False)
  now = metrics(workdir)
  assert list(now) == list(stored)
  for name in stored:
    np.testing.assert_array_equal(now[name], stored[name], err_msg=name)
    if not name.startswith("bert["):
      assert now[name].tobytes() == stored[name].tobytes() and now[name].dtype == stored[name].dtype
  assert read_text(summary_path) == summary


def test_an_arch_the_run_lacks_is_refused(finished):
  workdir, _, _ = finished
  with pytest.raises(ValueError, match="not one of the run's archs"):
    retrain.retrain_arch(workdir, "max", show_progress=False)
