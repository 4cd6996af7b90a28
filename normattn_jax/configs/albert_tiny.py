"""A tiny ALBERT that pre-trains in minutes on 2 CPU cores: E = 64, hidden 128, 4 shared layers,
4 heads, sequences of 128, an 8k SentencePiece vocabulary of the bundled Shakespeare corpus,
batch 32. LAMB as the paper, with lr and warm-up scaled to the short run."""
from normattn_jax.pretrain.train import base_pretrain_config


def get_config():
  c = base_pretrain_config()
  c.model.update(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                 intermediate_size=512, max_position_embeddings=128)
  c.data.update(vocab_size=8000, max_seq_length=128, dupe_factor=2)
  c.train.update(batch_size=32, num_steps=600, learning_rate=0.00176 * 4, warmup_steps=60,
                 log_every=20, eval_every=200, eval_batches=8, checkpoint_every=200)
  return c
