"""Fine-tune a pre-trained ALBERT on the offline sentence-pair task (``finetune.offline``): do
two lines of the corpus follow each other, or is the second from another held-out document?
From the documents that pre-training held out; 2 learning rates x 5 seeds in one program,
BERT's fine-tuning AdamW, about one epoch of the 5,928 training pairs.

  normattn-finetune --config finetune_shakespeare_next_line \\
    --workdir runs/finetune_next_line/softmax --config.encoder.path=runs/albert_tiny/softmax
"""
from normattn_jax.finetune.train import base_finetune_config


def get_config():
  c = base_finetune_config()
  c.encoder.update(kind="pretraining", path="runs/albert_tiny/softmax")
  c.task.update(name="shakespeare_next_line", max_seq_length=48, validation_fraction=0.05,
                dev_fraction=0.3, cache_dir="runs/corpus")
  c.learning_rates = (3e-4, 1e-3)
  c.num_seeds = 5
  c.train.update(batch_size=32, num_steps=180, warmup_steps=18, classifier_dropout=0.1,
                 eval_every=60, eval_batch_size=256, checkpoint_every=1)
  return c
