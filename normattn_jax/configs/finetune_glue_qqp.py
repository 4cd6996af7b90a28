"""The DNAS paper's fine-tuning of qqp (its Table 5, ALBERT's settings): lr 5e-5,
batch 128, 14000 steps with 1000 of warm-up, L = 512, encoder dropout 0.1, classifier
dropout 0.1, 5 seeds, the dev split scored every 2000 steps. TFDS prepares the data on first
use (a network is needed then). The encoder is a pre-training workdir:

  normattn-finetune --config finetune_glue_qqp \\
    --workdir runs/finetune_glue_qqp/softmax \\
    --config.encoder.path=runs/albert_large_dnas_paper/softmax
"""
from normattn_jax.finetune.train import downstream_config


def get_config():
  return downstream_config(
      "qqp", learning_rate=5e-5, batch_size=128, num_steps=14000, warmup_steps=1000,
      max_seq_length=512, encoder_dropout=0.1, eval_every=2000)
