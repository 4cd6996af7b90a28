"""The mode-finding task at the NAP paper's defaults: S=10, no positional embedding, the first
token projected to S classes, validated at 2N."""
from normattn_jax.sweep.config import base_config


def get_config():
  c = base_config()
  c.task.name = "mode_finding"
  c.task.vocab_size = 10
  c.task.output = "classes"
  return c
