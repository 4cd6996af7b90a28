"""The DNAS paper's BERT experiment on the ALBERT platform: 24 layers, hidden and embedding
size 1024, 16 heads (the paper's Section 6.2), FFN 4096 (BERT-large's) and a 30k SentencePiece
vocabulary (ALBERT's; the paper states neither), batch 4096, lr 0.00176, 125k steps (3125
warm-up), sequences of 512. Every layer has its own weights (24 groups of one layer): the
paper's model is BERT-large with about 334M parameters (its Appendix C.2), not ALBERT's
cross-layer sharing. The paper pre-trains on BookCorpus and English Wikipedia; TFDS has no
BookCorpus, so this reads Wikipedia alone (needs a network; a TPU pod in practice).
--config.model.attention.name=dnas|hnas picks the scheme."""
from normattn_jax.pretrain.train import base_pretrain_config


def get_config():
  c = base_pretrain_config()
  c.model.embedding_size = 1024
  c.model.num_hidden_groups = c.model.num_hidden_layers
  c.model.inner_group_num = 1
  c.data.corpus = "wikipedia"
  return c
