"""Fig. 15: learning rate x Transformer layers L = 0..6, case task, first-token output."""
from configs import case_distinction


def get_config():
  c = case_distinction.get_config()
  c.task.output = "first"
  c.sweep.name = "model.num_layers"
  c.sweep["values"] = tuple(range(0, 7))
  return c
