"""A report card: one normalisation through the four papers' diagnostics
(experiments/report_card.py). Name it and its options as in every config's attention section
(--config.attention.name=dnas, --config.attention.options.temperature=2.0 for a plugin's option);
--config.scale is smoke (minutes on a CPU), cpu (at most 20 minutes on 2 cores, the baselines
aside) or paper (the NAP paper's sizes, for a GPU); --config.baselines_dir holds the softmax and
NAP runs that every card of a scale shares ("" for <parent of workdir>/baselines/<scale>)."""
from normattn_jax.reporting.report_card import base_card_config


def get_config():
  return base_card_config()
