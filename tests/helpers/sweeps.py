"""Sweeps (``sweep.train``) at sizes that train in seconds."""
import json
import os

from normattn_jax.sweep import base_config
from normattn_jax.sweep.train import run_sweep


def tiny_sweep_config(**overrides):
  """Two archs x two learning rates x two seeds of the mode task, one block of d = 8 (the case
  task's evaluation sets make a program a quarter slower to compile: ``case_sweep_config``);
  ``overrides`` maps dotted field names to values."""
  c = base_config()
  c.task.name = "mode_finding"
  c.task.vocab_size = 4
  c.task.output = "classes"
  c.archs = ("nap", "sum")
  c.learning_rates = (0.001, 0.0003)
  c.num_seeds = 2
  c.task.seq_len = 8
  c.model.d_model = 8
  c.model.num_heads = 2
  c.model.num_layers = 1
  c.train.num_steps = 30
  c.train.eval_every = 10
  c.train.batch_size = 4
  c.train.checkpoint_every = 1
  c.eval.val_batches = 2
  c.eval.case_set_size = 4
  for key, value in overrides.items():
    section, _, field = key.rpartition(".")
    (c[section] if section else c)[field] = value
  return c


def case_sweep_config(**overrides):
  """``tiny_sweep_config`` of the case task (vocabulary 100), for the tests that read its case
  metrics."""
  return tiny_sweep_config(**{"task.name": "case_distinction", "task.vocab_size": 100,
                              "task.output": "tokens", **overrides})


def tiny_registry_grid(**overrides):
  """One small MTE grid with the registered sparsemax on it."""
  settings = {"archs": ("mte",), "attention.name": "scaled_sparsemax", "learning_rates": (0.003,),
              "num_seeds": 1, "train.num_steps": 10, "train.eval_every": 5}
  return tiny_sweep_config(**dict(settings, **overrides))


def tiny_retrain_config():
  """Two archs x two learning rates x two seeds of the mode task on a static point without
  blocks (grids named ``<arch>[model.num_layers=0]``), embeddings and output only: the programs
  compile in seconds, and BERT still trains with its warm-up and clipping."""
  c = base_config()
  c.archs = ("bert", "sum")
  c.task.name = "mode_finding"  # no case metrics: a smaller program to compile
  c.task.vocab_size = 4
  c.task.output = "classes"
  c.learning_rates = (0.003, 0.001)
  c.num_seeds = 2
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


def run(config, workdir, **kwargs):
  """``run_sweep`` without its progress bar and TensorBoard files."""
  return run_sweep(config, str(workdir), show_progress=False, tensorboard=False, **kwargs)


def read(workdir, name="summary.json"):
  """A JSON file of a workdir."""
  with open(os.path.join(workdir, name)) as f:
    return json.load(f)
