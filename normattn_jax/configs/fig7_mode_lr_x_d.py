"""Fig. 7: learning rate x model dimension d = 8..1024 on the mode-finding task."""
from normattn_jax.configs import mode_finding


def get_config():
  c = mode_finding.get_config()
  c.sweep.name = "model.d_model"
  c.sweep.grid = tuple(2 ** k for k in range(3, 11))
  return c
