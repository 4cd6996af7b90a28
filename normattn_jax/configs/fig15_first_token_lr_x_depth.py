"""Fig. 15: learning rate x Transformer layers L in {1, 2, 4, ..., 64}, case task, first-token
output. The paper's Appendix G.3 varies the depth "up to L = 64"; the grid takes the powers of
two, as the paper's other sweeps (d, N, heads, batch size) do."""
from normattn_jax.configs import case_distinction


def get_config():
  c = case_distinction.get_config()
  c.task.output = "first"
  c.sweep.name = "model.num_layers"
  c.sweep.grid = tuple(2 ** k for k in range(0, 7))
  return c
