"""The DNAS paper's fine-tuning of squad_v1.1 (its Table 5, ALBERT's settings): lr 5e-5,
batch 48, 3649 steps with 365 of warm-up, L = 384, encoder dropout 0.0, classifier
dropout 0.1, 5 seeds, the dev split scored once at the end. TFDS prepares the data on first
use (a network is needed then). The encoder is a pre-training workdir:

  normattn-finetune --config finetune_squad \\
    --workdir runs/finetune_squad/softmax \\
    --config.encoder.path=runs/albert_large_dnas_paper/softmax
"""
from normattn_jax.finetune.train import downstream_config


def get_config():
  return downstream_config(
      "squad_v1.1", learning_rate=5e-5, batch_size=48, num_steps=3649, warmup_steps=365,
      max_seq_length=384, encoder_dropout=0.0, eval_every=0)
