"""ALBERT-base (768 hidden, 12 layers, 12 heads, FFN 3072, E = 128) with the paper's optimiser
settings, on the bundled Shakespeare corpus unless --config.data.corpus=wikipedia."""
from normattn_jax.pretrain.train import base_pretrain_config


def get_config():
  c = base_pretrain_config()
  c.model.hidden_size = 768
  c.model.num_hidden_layers = 12
  c.model.num_attention_heads = 12
  c.model.intermediate_size = 3072
  return c
