"""The case-distinction task (argmin / first / argmax) at the NAP paper's defaults, no sweep:
six architectures x 10 learning rates (0.3^k) x 5 seeds, d=128, L=2, H=4, N=128, S=100,
3200 steps of batch 32, output across all tokens, validated at N/2."""
from normattn_jax.sweep.config import base_config


def get_config():
  return base_config()
