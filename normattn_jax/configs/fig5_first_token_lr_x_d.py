"""Fig. 5 and Fig. 14: learning rate x model dimension d = 8..1024, case task, output from the
first token (projected to N logits)."""
from normattn_jax.configs import fig3_case_lr_x_d


def get_config():
  c = fig3_case_lr_x_d.get_config()
  c.task.output = "first"
  return c
