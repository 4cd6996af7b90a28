"""ALBERT: shared layers, per-layer HNAS weights, the tied MLM head, the loss, ALBERT's LAMB."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from normattn_jax.attention import AttentionSpec
from normattn_jax.models.albert import (AlbertConfig, AlbertForPretraining, AlbertModel,
                                        pretraining_loss)
from normattn_jax.models.bert import BertConfig, BertLayer
from normattn_jax.train.optim import albert_lamb, albert_schedule, lamb_adapted

VOCAB, SEQ, PRED = 37, 10, 3


def small_config(**overrides):
  fields = dict(vocab_size=VOCAB, embedding_size=8, hidden_size=16, num_hidden_layers=3,
                num_attention_heads=4, intermediate_size=24, max_position_embeddings=16)
  return AlbertConfig(**dict(fields, **overrides))


def make_batch(seed=0, batch=2):
  rng = np.random.default_rng(seed)
  mask = np.ones((batch, SEQ), np.int32)
  mask[1, 7:] = 0
  return {"input_ids": rng.integers(5, VOCAB, (batch, SEQ)).astype(np.int32),
          "input_mask": mask,
          "segment_ids": (np.arange(SEQ) >= 5).astype(np.int32)[None].repeat(batch, 0),
          "masked_lm_positions": np.array([[1, 3, 0], [2, 4, 6]], np.int32)[:batch],
          "masked_lm_ids": rng.integers(5, VOCAB, (batch, PRED)).astype(np.int32),
          "masked_lm_weights": np.array([[1, 1, 0], [1, 1, 1]], np.float32)[:batch],
          "sentence_order_label": np.array([0, 1], np.int32)[:batch]}


def init(config, batch=None):
  """The model and its parameters, initialised by one compiled program (op by op, each of its
  many operations would compile alone)."""
  model = AlbertForPretraining(config)
  return model, jax.jit(model.init)(jax.random.key(0), batch or make_batch())["params"]


def param_shapes(config):
  """The parameters' shapes and dtypes, traced without compiling or running."""
  return jax.eval_shape(AlbertForPretraining(config).init, jax.random.key(0),
                        make_batch())["params"]


def layer_param_count(params):
  return sum(np.size(p) for k, v in params["albert"].items() if k.startswith("group_")
             for p in jax.tree.leaves(v))


def test_layers_share_parameters_within_a_group():
  one_group = param_shapes(small_config(num_hidden_layers=4))
  deeper = param_shapes(small_config(num_hidden_layers=8))
  two_groups = param_shapes(small_config(num_hidden_layers=4, num_hidden_groups=2))
  assert layer_param_count(one_group) == layer_param_count(deeper)
  assert layer_param_count(two_groups) == 2 * layer_param_count(one_group)
  assert (set(k for k in two_groups["albert"] if k.startswith("group_")) ==
          {"group_0_inner_0", "group_1_inner_0"})


def test_encoder_is_the_shared_layer_applied_in_turn():
  config = small_config(num_hidden_layers=4, num_hidden_groups=2)
  model = AlbertModel(config)
  batch = make_batch()
  params = jax.jit(model.init)(jax.random.key(1), batch["input_ids"], batch["input_mask"],
                               batch["segment_ids"])["params"]
  out = jax.jit(lambda p: model.apply({"params": p}, batch["input_ids"], batch["input_mask"],
                                      batch["segment_ids"], output_hidden_states=True))(params)
  layer = BertLayer(BertConfig(**{k: getattr(config, k) for k in (
      "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
      "intermediate_size", "max_position_embeddings", "layer_norm_eps")},
      hidden_act="gelu_new"))
  x = out["hidden_states"][0]
  mask = jnp.asarray(batch["input_mask"], bool)
  apply_layer = jax.jit(lambda p, x: layer.apply({"params": p}, x, mask))  # one program, 4 calls
  for l, group in enumerate((0, 0, 1, 1)):  # g(l) = floor(l G / L)
    x = apply_layer(params[f"group_{group}_inner_0"], x)
    chex.assert_trees_all_close(x, out["hidden_states"][l + 1], atol=1e-5)
  pooled = jnp.tanh(x[:, 0] @ params["pooler"]["kernel"] + params["pooler"]["bias"])
  chex.assert_trees_all_close(pooled, out["pooler_output"], atol=1e-5)


def test_embeddings_are_factorised():
  params = param_shapes(small_config())
  emb = params["albert"]["embeddings"]
  assert emb["word_embeddings"]["embedding"].shape == (VOCAB, 8)
  assert params["albert"]["embedding_projection"]["kernel"].shape == (8, 16)


def test_hnas_keeps_one_u_per_layer_and_head():
  config = small_config(attention=AttentionSpec("hnas", {"hybrid_init": 0.3}), inner_group_num=2,
                        num_hidden_layers=2)  # four u rows (2 x 2): a shorter compile than six
  model, params = init(config)
  u = params["albert"]["hybrid_weights"]
  assert u.shape == (2 * 2, 4)
  np.testing.assert_allclose(u, 0.3)
  assert "hybrid_weight" not in params["albert"]["group_0_inner_0"]["attention"]
  batch = make_batch()
  grads = jax.jit(jax.grad(
      lambda p: pretraining_loss(model.apply({"params": p}, batch), batch)[0]))(params)
  g = np.asarray(grads["albert"]["hybrid_weights"])
  assert np.all(np.abs(g).sum(axis=1) > 0), "every layer's u must get its own gradient"
  assert not np.allclose(g[0], g[-1])


def test_mlm_head_is_tied_to_the_word_embeddings():
  config = small_config(num_hidden_layers=1)  # the head is checked: one layer compiles sooner
  model, params = init(config)
  batch = make_batch()
  out, hidden = jax.jit(lambda p: (model.apply({"params": p}, batch), AlbertModel(config).apply(
      {"params": p["albert"]}, batch["input_ids"], batch["input_mask"], batch["segment_ids"])))(
          params)
  h = np.take_along_axis(np.asarray(hidden["last_hidden_state"]),
                         batch["masked_lm_positions"][..., None], axis=1)
  h = h @ params["mlm_transform"]["kernel"] + params["mlm_transform"]["bias"]
  h = np.asarray(jax.nn.gelu(h, approximate=True))
  h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-12)
  h = h * params["mlm_norm"]["scale"] + params["mlm_norm"]["bias"]
  table = params["albert"]["embeddings"]["word_embeddings"]["embedding"]
  np.testing.assert_allclose(out["mlm_logits"], h @ np.asarray(table).T + params["mlm_bias"],
                             atol=1e-4)
  # The table gets gradient from the output layer too: rows of tokens never in the input.
  unseen = sorted(set(range(VOCAB)) - set(batch["input_ids"].ravel()))
  grads = jax.jit(jax.grad(
      lambda p: pretraining_loss(model.apply({"params": p}, batch), batch)[0]))(params)
  g = np.asarray(grads["albert"]["embeddings"]["word_embeddings"]["embedding"])
  assert np.all(np.abs(g[unseen]).sum(axis=1) > 0)


def test_pretraining_loss_by_hand():
  rng = np.random.default_rng(3)
  batch = make_batch()
  outputs = {"mlm_logits": rng.normal(size=(2, PRED, VOCAB)).astype(np.float32),
             "sop_logits": rng.normal(size=(2, 2)).astype(np.float32)}
  loss, metrics = pretraining_loss(outputs, batch)
  logp = outputs["mlm_logits"] - np.log(np.exp(outputs["mlm_logits"]).sum(-1, keepdims=True))
  nll = -np.take_along_axis(logp, batch["masked_lm_ids"][..., None], -1)[..., 0]
  w = batch["masked_lm_weights"]
  mlm = (w * nll).sum() / (w.sum() + 1e-5)
  sop_logp = outputs["sop_logits"] - np.log(np.exp(outputs["sop_logits"]).sum(-1, keepdims=True))
  sop = -np.mean(sop_logp[np.arange(2), batch["sentence_order_label"]])
  np.testing.assert_allclose(loss, mlm + sop, rtol=1e-5)
  correct = (logp.argmax(-1) == batch["masked_lm_ids"])
  np.testing.assert_allclose(metrics["mlm_accuracy"], (w * correct).sum() / w.sum(), rtol=1e-6)


def test_bf16_compute_stays_close_to_float32():
  config = small_config(attention="dnas", num_hidden_layers=1)  # one layer compiles sooner
  _, params = init(config)
  batch = make_batch()
  f32, bf16 = jax.jit(lambda p: (
      AlbertForPretraining(config).apply({"params": p}, batch),
      AlbertForPretraining(config, dtype=jnp.bfloat16).apply({"params": p}, batch)))(params)
  assert bf16["mlm_logits"].dtype == jnp.float32
  assert np.all(np.isfinite(bf16["mlm_logits"]))
  np.testing.assert_allclose(bf16["mlm_logits"], f32["mlm_logits"], atol=0.1)


@pytest.mark.parametrize("field, value, match", [
    ("embedding_size", 0, "embedding_size"), ("num_hidden_groups", 4, "num_hidden_groups"),
    ("attention", "cosine", "normalization"),
    ("attention", {"name": "hnas", "options": {"hybrid_init": 1.5}}, "hybrid_init"),
    ("inner_group_num", 1.5, "inner_group_num")])
def test_bad_config_names_the_field(field, value, match):
  with pytest.raises(ValueError, match=match):
    small_config(**{field: value})


# ----- ALBERT's LAMB -----

def test_schedule_is_albert_warmup_then_polynomial_decay():
  lr = albert_schedule(0.01, num_steps=100, warmup_steps=10)
  np.testing.assert_allclose([float(lr(s)) for s in (0, 5, 10, 50, 100, 150)],
                             [0.0, 0.005, 0.009, 0.005, 0.0, 0.0], atol=1e-9)


def test_adapted_mask_excludes_layer_norms_biases_and_hybrid_weights():
  params = param_shapes(small_config(attention="hnas"))
  flat = {"/".join(str(getattr(k, "key", k)) for k in path): v
          for path, v in jax.tree_util.tree_leaves_with_path(lamb_adapted(params))}
  assert flat["albert/group_0_inner_0/attention/query/kernel"]
  assert flat["albert/embeddings/word_embeddings/embedding"]
  assert not flat["albert/group_0_inner_0/attention/query/bias"]
  assert not flat["albert/group_0_inner_0/attention_norm/scale"]
  assert not flat["albert/embeddings/layer_norm/scale"]
  assert not flat["mlm_norm/bias"]
  assert not flat["mlm_bias"]
  assert not flat["albert/hybrid_weights"]


def albert_lamb_by_hand(params, grads_seq, peak, num_steps, warmup, wd, clip):
  """google-research/albert's LAMBOptimizer and clip_by_global_norm, in numpy."""
  params = {k: np.array(v, np.float64) for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in params.items()}
  v = {k: np.zeros_like(p) for k, p in params.items()}
  for step, grads in enumerate(grads_seq):
    norm = np.sqrt(sum(np.sum(np.square(g)) for g in grads.values()))
    grads = {k: g * clip / max(norm, clip) for k, g in grads.items()}
    lr = peak * step / warmup if step < warmup else peak * (1 - step / num_steps)
    for k in params:
      m[k] = 0.9 * m[k] + 0.1 * grads[k]
      v[k] = 0.999 * v[k] + 0.001 * grads[k] ** 2
      update = m[k] / (np.sqrt(v[k]) + 1e-6)
      excluded = "bias" in k or "LayerNorm" in k
      if not excluded:
        update = update + wd * params[k]
      ratio = 1.0
      if not excluded:
        w_norm, g_norm = np.linalg.norm(params[k]), np.linalg.norm(update)
        ratio = w_norm / g_norm if w_norm > 0 and g_norm > 0 else 1.0
      params[k] = params[k] - ratio * lr * update
  return params


def test_lamb_chain_matches_albert_by_hand():
  rng = np.random.default_rng(0)
  params = {"dense/kernel": rng.normal(size=(4, 3)), "dense/bias": rng.normal(size=3),
            "LayerNorm/scale": 1 + 0.1 * rng.normal(size=3), "zero/kernel": np.zeros((2, 2))}
  grads_seq = [{k: 3 * rng.normal(size=np.shape(p)) for k, p in params.items()}
               for _ in range(4)]
  grads_seq[2] = {k: 1e-3 * g for k, g in grads_seq[2].items()}  # below the clipping norm
  expected = albert_lamb_by_hand(params, grads_seq, peak=0.1, num_steps=10, warmup=2, wd=0.01,
                                 clip=1.0)
  tree = lambda d: {k.replace("/", "."): jnp.asarray(v, jnp.float32) for k, v in d.items()}
  optimizer = albert_lamb(0.1, num_steps=10, warmup_steps=2, weight_decay=0.01, clip_norm=1.0)
  ours = tree(params)
  # lamb_adapted reads names from the tree path: map ALBERT's names onto flax-style ones.
  flax_names = {"dense.kernel": ("dense", "kernel"), "dense.bias": ("dense", "bias"),
                "LayerNorm.scale": ("layer_norm", "scale"), "zero.kernel": ("zero", "kernel")}
  nest = lambda flat: {outer: {inner: flat[k] for k, (o, inner) in flax_names.items()
                               if o == outer} for outer, _ in flax_names.values()}
  ours = nest(ours)
  state = optimizer.init(ours)
  update = jax.jit(optimizer.update)  # one program for the four steps (op by op: hundreds)
  for grads in grads_seq:
    updates, state = update(nest(tree(grads)), state, ours)
    ours = optax.apply_updates(ours, updates)
  for k, (outer, inner) in flax_names.items():
    np.testing.assert_allclose(ours[outer][inner], expected[k.replace(".", "/")], rtol=2e-5,
                               atol=1e-7, err_msg=k)
