"""The report card kind of run: a normalisation put through the four papers' diagnostics and
its own paper's claims, beside the softmax and NAP baselines (``train``), its language models
(``lm``), the registered diagnostics (``diagnostics``), the statistics of its comparisons
(``stats``) and its words (``text``). Importing it registers the kinds (``"report_card"``,
``"card_lm"``).

It needs the ``[analysis]`` extra; checked here, before any submodule imports it.
"""
from normattn_jax._extras import require

require("ml_collections", "analysis")
require("scipy", "analysis")
from normattn_jax.card.train import REPORT_CARD, card_config, run

__all__ = ["REPORT_CARD", "card_config", "run"]
