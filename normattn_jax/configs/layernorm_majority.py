"""Brody et al.'s majority analysis (Sec. 4.1, Fig. 2, 3) as the paper ran it: 50 tokens of 20
types, the majority type leading by at least 6, 10 sequences per partition, an 80 / 20 split;
one pre-LN encoder layer (d = 8, FFN 8) whose LayerNorm before attention is each of the three
variants (with projection, without it, without it as the authors' code computes it); Adam 1e-3
decaying linearly to 0 over 10,000 epochs, batches of 6000; 10 seeds. Run it with
normattn-majority (the NAP architectures on the same task: normattn_jax/configs/majority.py)."""
from normattn_jax.analysis.majority import base_config


def get_config():
  return base_config()
