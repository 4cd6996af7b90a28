"""Fig. 13: learning rate x batch size 1..128, case task, output across all tokens. The number of
steps scales as 32 / batch size, so every point sees the same 102,400 examples."""
from normattn_jax.configs import case_distinction


def get_config():
  c = case_distinction.get_config()
  c.sweep.name = "train.batch_size"
  c.sweep.grid = tuple(2 ** k for k in range(0, 8))
  c.sweep.steps_scale = "inverse"
  c.sweep.steps_reference = 32
  return c
