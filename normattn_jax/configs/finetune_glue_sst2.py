"""The DNAS paper's fine-tuning of sst2 (its Table 5, ALBERT's settings): lr 1e-5,
batch 32, 20935 steps with 1256 of warm-up, L = 512, encoder dropout 0.0, classifier
dropout 0.1, 5 seeds, the dev split scored every 4187 steps. TFDS prepares the data on first
use (a network is needed then). The encoder is a pre-training workdir:

  normattn-finetune --config finetune_glue_sst2 \\
    --workdir runs/finetune_glue_sst2/softmax \\
    --config.encoder.path=runs/albert_large_dnas_paper/softmax
"""
from normattn_jax.finetune.train import downstream_config


def get_config():
  return downstream_config(
      "sst2", learning_rate=1e-5, batch_size=32, num_steps=20935, warmup_steps=1256,
      max_seq_length=512, encoder_dropout=0.0, eval_every=4187)
