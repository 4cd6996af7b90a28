"""Fig. 3: learning rate x model dimension d = 8..1024, case task, output across all tokens."""
from normattn_jax.configs import case_distinction


def get_config():
  c = case_distinction.get_config()
  c.sweep.name = "model.d_model"
  c.sweep.grid = tuple(2 ** k for k in range(3, 11))
  return c
