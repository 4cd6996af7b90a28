"""ALBERT pre-trainings (``pretrain.train``) at sizes that train in seconds, on fixed random
examples in place of a corpus."""
import json
import os
import types

import numpy as np

from normattn_jax.pretrain.train import base_pretrain_config

VOCAB, SEQ, PRED = 40, 16, 3
# stands in for the SentencePiece model: the summary records a vocabulary's path and hash
FAKE_VOCAB = types.SimpleNamespace(size=VOCAB, path=os.path.abspath(__file__))


class RandomExamples:
  """Fixed random examples with ``PretrainingData``'s batch contract (pure in step)."""

  def __init__(self, num_examples, seed):
    rng = np.random.default_rng(seed)
    self.arrays = {
        "input_ids": rng.integers(5, VOCAB, (num_examples, SEQ)).astype(np.int32),
        "input_mask": np.ones((num_examples, SEQ), np.int32),
        "segment_ids": (np.arange(SEQ) >= SEQ // 2).astype(np.int32)[None].repeat(
            num_examples, 0),
        "masked_lm_positions": rng.integers(1, SEQ, (num_examples, PRED)).astype(np.int32),
        "masked_lm_ids": rng.integers(5, VOCAB, (num_examples, PRED)).astype(np.int32),
        "masked_lm_weights": np.ones((num_examples, PRED), np.float32),
        "sentence_order_label": rng.integers(0, 2, num_examples).astype(np.int32),
    }
    self.num_examples = num_examples

  def batch(self, step, batch_size, *, seed, process_index=0, process_count=1):
    """The batch of ``step``: ``batch_size`` examples drawn from ``seed`` and the step."""
    rows = np.random.default_rng([seed, step]).choice(self.num_examples, batch_size, False)
    share = batch_size // process_count
    rows = rows[process_index * share:(process_index + 1) * share]
    return {k: v[rows] for k, v in self.arrays.items()}


def tiny_pretrain_config(attention="softmax"):
  """Six steps of a two-layer ALBERT of width 16 on ``RandomExamples``' vocabulary."""
  c = base_pretrain_config()
  c.model.update(embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=SEQ)
  c.model.attention.name = attention
  c.data.update(vocab_size=VOCAB, max_seq_length=SEQ)
  c.train.update(batch_size=4, num_steps=6, learning_rate=0.01, warmup_steps=2, log_every=1,
                 eval_every=3, eval_batches=2, checkpoint_every=2)
  return c


def read_history(workdir):
  """The rows of a workdir's ``history.jsonl``."""
  with open(os.path.join(workdir, "history.jsonl")) as f:
    return [json.loads(line) for line in f]
