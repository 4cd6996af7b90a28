"""The experiment no paper ran: the bundled all-MiniLM-L6-v2 (pre-trained with softmax) with its
attention normalisation switched before fine-tuning, on the offline genre task (documents held
out from this project's pre-training; MiniLM's own pre-training data are not this corpus).
The config's argument is ``encoder.attention.name``: "" or "softmax" keeps MiniLM as it is;
"dnas", "hnas" (its u starts at 0: softmax's weights at the start) or "nap" switch it.

  normattn-finetune --config finetune_minilm_genre:hnas \\
    --workdir runs/finetune_minilm_genre/hnas
"""
from normattn_jax.finetune.train import base_finetune_config
from normattn_jax.attention.section import attention_section


def get_config(attention: str = ""):
  c = base_finetune_config()
  options = {"hybrid_init": 0.0} if attention == "hnas" else {}
  c.encoder.update(kind="minilm", path="", attention=attention_section(attention, **options),
                   dropout=0.0)
  c.task.update(name="shakespeare_genre", max_seq_length=48, passage_lines=4,
                validation_fraction=0.05, dev_fraction=0.3, cache_dir="runs/corpus")
  c.learning_rates = (1e-4,)
  c.num_seeds = 3  # a 6-layer, 384-wide model: sized for 2 CPU cores
  c.train.update(batch_size=16, num_steps=120, warmup_steps=12, classifier_dropout=0.1,
                 eval_every=60, eval_batch_size=128, checkpoint_every=1)
  return c
