"""Fig. 6: learning rate x attention heads M = 1..128 (d=128), case task, first-token output."""
from normattn_jax.configs import case_distinction


def get_config():
  c = case_distinction.get_config()
  c.task.output = "first"
  c.sweep.name = "model.num_heads"
  c.sweep.grid = tuple(2 ** k for k in range(0, 8))
  return c
