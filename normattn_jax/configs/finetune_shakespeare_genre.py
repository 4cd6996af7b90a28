"""Fine-tune a pre-trained ALBERT on the offline genre task (``finetune.offline``): 4-line
passages of the First Folio's plays -> comedy / history / tragedy, from the documents that
pre-training held out. 2 learning rates x 5 seeds in one program, BERT's fine-tuning AdamW
(warm-up 10%, linear decay), dropout 0.1 on the pooled output only (the DNAS paper's Table 5:
"BERT DR" 0, "Classifier DR" 0.1), about 4 epochs of the 1,215 training passages (sized for
minutes per run on 2 CPU cores).

  normattn-finetune --config finetune_shakespeare_genre \\
    --workdir runs/finetune_genre/softmax --config.encoder.path=runs/albert_tiny/softmax
"""
from normattn_jax.finetune.train import base_finetune_config


def get_config():
  c = base_finetune_config()
  c.encoder.update(kind="pretraining", path="runs/albert_tiny/softmax")
  c.task.update(name="shakespeare_genre", max_seq_length=48, passage_lines=4,
                validation_fraction=0.05, dev_fraction=0.3, cache_dir="runs/corpus")
  c.learning_rates = (1e-4, 3e-4)
  c.num_seeds = 5
  c.train.update(batch_size=16, num_steps=300, warmup_steps=30, classifier_dropout=0.1,
                 eval_every=100, eval_batch_size=128, checkpoint_every=1)
  return c
