"""Brody et al., Table 1 (and Appendix D's Table 2): unselectable keys in a GPT-2-style LM
trained with and without LayerNorm's scaling before attention
(``normattn_jax.analysis.causal_lm_keys``, ``normattn-unselectable-lm``): the
reduced run for 2 CPU cores, the paper's sizes where they are cheap."""
from normattn_jax.analysis.causal_lm_keys import base_config


def get_config():
  return base_config()
