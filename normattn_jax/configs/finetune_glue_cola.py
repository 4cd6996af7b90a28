"""The DNAS paper's fine-tuning of cola (its Table 5, ALBERT's settings): lr 1e-5,
batch 16, 5336 steps with 320 of warm-up, L = 512, encoder dropout 0.0, classifier
dropout 0.1, 5 seeds, the dev split scored every 667 steps. TFDS prepares the data on first
use (a network is needed then). The encoder is a pre-training workdir:

  normattn-finetune --config finetune_glue_cola \\
    --workdir runs/finetune_glue_cola/softmax \\
    --config.encoder.path=runs/albert_large_dnas_paper/softmax
"""
from normattn_jax.finetune.train import downstream_config


def get_config():
  return downstream_config(
      "cola", learning_rate=1e-5, batch_size=16, num_steps=5336, warmup_steps=320,
      max_seq_length=512, encoder_dropout=0.0, eval_every=667)
