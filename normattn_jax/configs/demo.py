"""`make run`: all six architectures, a few learning rates and seeds, small d and N (~5 min on
2 CPU cores). The case-distinction task with all-token output, validated at N/2."""
from normattn_jax.sweep.config import base_config


def get_config():
  c = base_config()
  c.learning_rates = (0.3 ** 3, 0.3 ** 5, 0.3 ** 7)
  c.num_seeds = 3
  c.task.seq_len = 32
  c.model.d_model = 32
  c.train.num_steps = 600
  c.train.eval_every = 100
  c.eval.val_batches = 8
  c.eval.case_set_size = 200
  return c
