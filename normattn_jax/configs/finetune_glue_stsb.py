"""The DNAS paper's fine-tuning of stsb (its Table 5, ALBERT's settings): lr 2e-5,
batch 16, 3598 steps with 214 of warm-up, L = 512, encoder dropout 0.0, classifier
dropout 0.1, 5 seeds, the dev split scored every 514 steps. TFDS prepares the data on first
use (a network is needed then). The encoder is a pre-training workdir:

  normattn-finetune --config finetune_glue_stsb \\
    --workdir runs/finetune_glue_stsb/softmax \\
    --config.encoder.path=runs/albert_large_dnas_paper/softmax
"""
from normattn_jax.finetune.train import downstream_config


def get_config():
  return downstream_config(
      "stsb", learning_rate=2e-5, batch_size=16, num_steps=3598, warmup_steps=214,
      max_seq_length=512, encoder_dropout=0.0, eval_every=514)
