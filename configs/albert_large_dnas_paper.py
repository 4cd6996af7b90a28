"""The DNAS paper's BERT experiment on the ALBERT platform: 24 layers, hidden and embedding
size 1024 (the paper's Section 6.2), 16 heads, batch 4096, lr 0.00176, 125k steps (3125
warm-up), sequences of 512, 30k SentencePiece vocabulary. The paper pre-trains on BookCorpus
and English Wikipedia; TFDS has no BookCorpus, so this reads Wikipedia alone (needs a network;
a TPU pod in practice). --config.model.attention=dnas|hnas picks the scheme."""
from normattn_jax.train.pretrain import base_pretrain_config


def get_config():
  c = base_pretrain_config()
  c.model.embedding_size = 1024
  c.data.corpus = "wikipedia"
  return c
