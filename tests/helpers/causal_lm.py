"""The causal-LM key analysis (``analysis.causal_lm_keys``) at a size that trains in seconds."""
from normattn_jax.configs import unselectable_lm
from normattn_jax.analysis import causal_lm_keys as lm_keys

LENGTH = 12  # tokens per sequence


def tiny_causal_lm_config(**train):
  """The run's config at a size that trains in seconds; ``train`` overrides its train fields."""
  c = unselectable_lm.get_config()
  c.model.update(max_len=LENGTH, num_layers=1)
  c.train.update(dict(dict(seeds=2, batch_size=4, num_steps=6, log_every=2, checkpoint_every=2,
                           warmup_steps=2, learning_rate=1e-2), **train))
  lm_keys.validate_config(c)
  return c
