"""Table 1 (and Fig. 9's columns): from BERT to MTE step by step on the case task with output
across all tokens: BERT, - warm up, - grad. clip, + normalize, + GELU. The sweep axis is the
ablation stage at the default d=128 (the paper takes the best over learning rate x d)."""
from normattn_jax.configs import case_distinction
from normattn_jax.sweep.config import ABLATION_STAGES


def get_config():
  c = case_distinction.get_config()
  c.archs = ("bert",)
  c.sweep.name = "ablation"
  c.sweep.grid = tuple(range(len(ABLATION_STAGES)))
  return c
