"""The pre-training kind of run: ALBERT-style masked-language-model pre-training with any
normalisation (LAMB, a data-parallel step over one model), and the comparison of
normalisations. Importing it registers the kind (``"pretraining"``). It needs the ``[pretrain]``
extra (TFDS, SentencePiece).
"""
from normattn_jax._extras import require

require("ml_collections", "pretrain")
from normattn_jax.pretrain.train import PRETRAINING, base_pretrain_config, run_pretraining

__all__ = ["PRETRAINING", "base_pretrain_config", "run_pretraining"]
