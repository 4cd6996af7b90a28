"""Fig. 4: learning rate x sequence length N = 4..512, case task, output across all tokens."""
from normattn_jax.configs import case_distinction


def get_config():
  c = case_distinction.get_config()
  c.sweep.name = "task.seq_len"
  c.sweep.grid = tuple(2 ** k for k in range(2, 10))
  return c
