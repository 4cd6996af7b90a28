"""Brody et al., Table 1 (and Appendix D's Table 2): unselectable keys in a GPT-2-style LM
trained with and without LayerNorm's scaling before attention
(``normattn_jax.analysis.causal_lm_keys``, ``experiments/analyze_unselectable_lm.py``).

The reduced run for 2 CPU cores: the paper's sizes where they are cheap (d = 8, 4 layers, 4 heads,
GPT-2's block), fewer steps, shorter windows and a smaller vocabulary elsewhere.
``analysis.tolerance`` is the LP's relative margin, above float32 rounding (the keys without
scaling lie in the ones-orthogonal subspace only up to ~1e-7). ``train.models_per_vmap``: the
seeds per vmap, 0 the engine's auto width (``train.grid.models_per_vmap``)."""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.model = ml_collections.ConfigDict(dict(
      d_model=8, num_layers=4, num_heads=4, mlp_ratio=4, max_len=256, dropout_rate=0.0,
      layer_norm_epsilon=1e-5, init_std=0.02))
  c.data = ml_collections.ConfigDict(dict(
      corpus="shakespeare", cache_dir="", wikipedia_config="20231101.en", vocab_size=2048,
      lines_per_document=64, validation_fraction=0.05, max_documents=0))
  c.train = ml_collections.ConfigDict(dict(
      seeds=1, seed=0, batch_size=8, num_steps=1000, learning_rate=3e-3, warmup_steps=100,
      weight_decay=0.0, clip_norm=1.0, log_every=50, checkpoint_every=250, models_per_vmap=0))
  c.analysis = ml_collections.ConfigDict(dict(
      num_sequences=16, init_sequences=4, heldout_loss_sequences=64, tolerance=1e-6))
  return c
