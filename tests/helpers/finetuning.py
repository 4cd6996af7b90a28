"""Fine-tunings (``finetune.train``) from a tiny pre-training on generated plays."""
import os

import numpy as np

from normattn_jax.finetune import train as ft
from normattn_jax.pretrain.train import base_pretrain_config, run_pretraining

from helpers.texts import write_sentences

PLAYS = ("tempest", "henry_v", "hamlet")  # a comedy, a history and a tragedy of the Folio
HELD_OUT = 0.5  # of the test corpus's documents, so that the task has enough of them


def write_plays(folder, lines=640, seed=0):
  """Text files named as the corpus's plays, of ``lines`` random sentences."""
  os.makedirs(folder, exist_ok=True)
  rng = np.random.default_rng(seed)
  paths = [os.path.join(folder, f"{play}_gut.txt") for play in PLAYS]
  for path in paths:
    write_sentences(path, lines, rng, words=(4, 10))
  return paths


def pretraining_config(files):
  """A tiny pre-training on ``files``, two steps."""
  c = base_pretrain_config()
  c.model.update(embedding_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=32)
  c.data.update(corpus="files", files=tuple(files), vocab_size=60, max_seq_length=32,
                max_predictions_per_seq=4, dupe_factor=1, validation_fraction=HELD_OUT)
  c.train.update(batch_size=4, num_steps=2, warmup_steps=1, log_every=1, eval_every=2,
                 eval_batches=1, checkpoint_every=2)
  return c


def pretrained(root):
  """``root`` with a finished tiny pre-training run (``pretrain``) on text files named as the
  corpus's plays (``corpus``)."""
  files = write_plays(str(root / "corpus" / "shakespeare"))
  run_pretraining(pretraining_config(files), str(root / "pretrain"), show_progress=False,
                  tensorboard=False)
  return root


def tiny_finetune_config(root, learning_rates=(1e-3,), num_seeds=1):
  """Six steps of fine-tuning ``pretrained(root)``'s encoder on the genre task."""
  c = ft.base_finetune_config()
  c.encoder.update(path=str(root / "pretrain"), dropout=0.1)
  c.task.update(cache_dir=str(root / "corpus"), max_seq_length=16, validation_fraction=HELD_OUT)
  c.learning_rates, c.num_seeds = learning_rates, num_seeds
  c.train.update(batch_size=4, num_steps=6, warmup_steps=1, eval_every=2, eval_batch_size=32,
                 checkpoint_every=1, models_per_vmap=1)
  return c
