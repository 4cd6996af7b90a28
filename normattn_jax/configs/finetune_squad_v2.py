"""The DNAS paper's fine-tuning of squad_v2.0 (its Table 5, ALBERT's settings): lr 3e-5,
batch 48, 8144 steps with 814 of warm-up, L = 512, encoder dropout 0.0, classifier
dropout 0.1, 5 seeds, the dev split scored every 2036 steps. TFDS prepares the data on first
use (a network is needed then). The encoder is a pre-training workdir:

  normattn-finetune --config finetune_squad_v2 \\
    --workdir runs/finetune_squad_v2/softmax \\
    --config.encoder.path=runs/albert_large_dnas_paper/softmax
"""
from normattn_jax.finetune.train import downstream_config


def get_config():
  return downstream_config(
      "squad_v2.0", learning_rate=3e-5, batch_size=48, num_steps=8144, warmup_steps=814,
      max_seq_length=512, encoder_dropout=0.0, eval_every=2036)
