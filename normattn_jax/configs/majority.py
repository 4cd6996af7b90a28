"""The majority task of Brody et al. (LayerNorm expressivity) on the NAP paper's architectures:
50 tokens of 20 types, the majority type (leading by at least 6) predicted at every position,
d = 8, one layer, one head, no positional embedding, Adam 1e-3. The paper's own model (one pre-LN
layer, LayerNorm with vs without projection) is a different block."""
from normattn_jax.sweep.config import base_config


def get_config():
  c = base_config()
  c.task.name = "majority"
  c.task.seq_len = 50
  c.task.vocab_size = 20
  c.task.output = "token_classes"
  c.task.min_margin = 6
  c.model.d_model = 8
  c.model.num_layers = 1
  c.model.num_heads = 1
  c.model.positional = False
  c.learning_rates = (1e-3,)
  return c
