"""The DNAS paper's fine-tuning of rte (its Table 5, ALBERT's settings): lr 3e-5,
batch 32, 800 steps with 200 of warm-up, L = 512, encoder dropout 0.1, classifier
dropout 0.1, 5 seeds, the dev split scored every 200 steps. TFDS prepares the data on first
use (a network is needed then). The encoder is a pre-training workdir:

  normattn-finetune --config finetune_glue_rte \\
    --workdir runs/finetune_glue_rte/softmax \\
    --config.encoder.path=runs/albert_large_dnas_paper/softmax
"""
from normattn_jax.finetune.train import downstream_config


def get_config():
  return downstream_config(
      "rte", learning_rate=3e-5, batch_size=32, num_steps=800, warmup_steps=200,
      max_seq_length=512, encoder_dropout=0.1, eval_every=200)
