"""The DNAS paper's BERT experiment on the ALBERT platform: 24 layers, hidden 1024, 16 heads,
batch 4096, lr 0.00176, 125k steps (3125 warm-up), sequences of 512, 30k SentencePiece
vocabulary, English Wikipedia through TFDS (needs a network; a TPU pod in practice).
--config.model.attention=dnas|hnas picks the scheme."""
from normattn_jax.train.pretrain import base_pretrain_config


def get_config():
  c = base_pretrain_config()
  c.data.corpus = "wikipedia"
  return c
