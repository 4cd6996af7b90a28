"""Fig. 16 and Table 5: learning rate x vocabulary size S = 2..256 on the mode-finding task.
The number of steps scales as S / 8, so the examples seen per class stay about constant."""
from normattn_jax.configs import mode_finding


def get_config():
  c = mode_finding.get_config()
  c.sweep.name = "task.vocab_size"
  c.sweep.grid = tuple(2 ** k for k in range(1, 9))
  c.sweep.steps_scale = "proportional"
  c.sweep.steps_reference = 8
  return c
