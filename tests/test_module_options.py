"""The attention module's options: the output gate (Qiu et al. 2025), QK-norm and differential
attention (Ye et al. 2024), each against a numpy reference of its formula, off by default with
today's parameter trees, and trainable in the NAP architectures, BERT and ALBERT."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from normattn_jax.attention.module import MultiHeadAttention, lambda_init
from normattn_jax.attention.module_spec import AttentionModuleSpec
from normattn_jax.blocks import TransformerBlock
from normattn_jax.models.albert import AlbertConfig, AlbertForPretraining, pretraining_loss
from normattn_jax.models.bert import BertConfig, BertModel
from normattn_jax.models.sequence import SequenceModel
from normattn_jax.sweep import config as config_lib
from normattn_jax.pretrain import train as pretrain
from normattn_jax.sweep.programs import Setup

B, N, F, H = 2, 5, 16, 2  # batch, positions, features, heads: head_dim 8


def inputs(seed=0):
  return jax.random.normal(jax.random.key(seed), (B, N, F))


def perturbed(params, seed=1):
  """Every leaf moved randomly, so that norm scales and biases are not at their inits."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [x + 0.3 * jax.random.normal(k, x.shape, x.dtype)
                                   for x, k in zip(leaves, keys)])


def reference(p, x, *, output_gate=None, qk_norm=None, differential=False, layer_index=1,
              mask=None):
  """Softmax multi-head attention with the three options, in float64 numpy."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), p)
  x = np.asarray(x, np.float64)
  proj = lambda name: np.einsum("bnf,fhd->bnhd", x, p[name]["kernel"]) + p[name]["bias"]
  q, k, v = proj("query"), proj("key"), proj("value")
  d = q.shape[-1]
  m = d // 2 if differential else d
  q, k = q.reshape(q.shape[:-1] + (-1, m)), k.reshape(k.shape[:-1] + (-1, m))  # [b,n,h,maps,m]

  def norm(y, name):
    if qk_norm == "layer":
      y = y - y.mean(-1, keepdims=True)
    y = y / np.sqrt(np.mean(y ** 2, -1, keepdims=True) + 1e-6) * p[name]["scale"]
    return y + p[name]["bias"] if qk_norm == "layer" else y

  if qk_norm:
    q, k = norm(q, "query_norm"), norm(k, "key_norm")
  logits = np.einsum("bqhcm,bkhcm->bchqk", q / np.sqrt(m), k)
  if mask is not None:
    logits = np.where(mask[:, None, None, None, :], logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w = w / w.sum(-1, keepdims=True)
  if differential:
    init = 0.8 - 0.6 * np.exp(-0.3 * (layer_index - 1))
    lam = (np.exp(p["lambda_q1"] @ p["lambda_k1"]) - np.exp(p["lambda_q2"] @ p["lambda_k2"])
           + init)
    w = w[:, 0] - lam * w[:, 1]
  else:
    w = w[:, 0]
  o = np.einsum("bhqk,bkhd->bqhd", w, v)
  if differential:
    o = o / np.sqrt(np.mean(o ** 2, -1, keepdims=True) + 1e-5) * p["diff_norm"]["scale"]
    o = o * (1 - init)
  if output_gate:
    g = np.einsum("bnf,f...->bn...", x, p["gate"]["kernel"]) + p["gate"]["bias"]
    g = 1 / (1 + np.exp(-g))
    o = o * (g[..., None] if output_gate == "headwise" else g)
  return np.einsum("bqhd,hdf->bqf", o, p["out"]["kernel"]) + p["out"]["bias"]


CASES = [dict(output_gate="headwise"), dict(output_gate="elementwise"), dict(qk_norm="rms"),
         dict(qk_norm="layer"), dict(differential=True), dict(differential=True, layer_index=4),
         dict(output_gate="elementwise", qk_norm="rms", differential=True, layer_index=2)]


# the gate and QK-norm act before and after the path, one code for all; the fast and fused paths
# take differential attention's two maps, alone and with the other options
@pytest.mark.parametrize("options", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("implementation", ["quadratic", "fast", "fused"])
@pytest.mark.fast_subset(lambda p: p["implementation"] == "quadratic"
                         or p["options"] in (dict(differential=True), CASES[-1]))
def test_each_option_is_its_formula(options, implementation):
  x = inputs()
  layer = MultiHeadAttention(num_heads=H, implementation=implementation, **options)
  params = perturbed(layer.init(jax.random.key(0), x)["params"])
  real = jnp.arange(N) < N - 1
  got = layer.apply({"params": params}, x, padding_mask=real)
  want = reference(params, x, mask=np.broadcast_to(real, (B, N)), **options)
  np.testing.assert_allclose(np.asarray(got)[:, :-1], want[:, :-1], rtol=2e-4, atol=2e-5)


def test_the_lambda_init_follows_the_paper():
  assert lambda_init(1) == pytest.approx(0.2)
  assert lambda_init(2) == pytest.approx(0.8 - 0.6 * np.exp(-0.3))
  assert lambda_init(100) == pytest.approx(0.8, abs=1e-6)


def test_differential_applies_another_normalisation_to_both_maps():
  x = inputs()
  weights = {}
  for impl in ("quadratic", "fast"):
    layer = MultiHeadAttention(num_heads=H, normalization="nap", differential=True,
                               implementation=impl)
    params = perturbed(jax.jit(layer.init)(jax.random.key(0), x)["params"])  # not op by op
    weights[impl] = jax.jit(layer.apply)({"params": params}, x)
  np.testing.assert_allclose(weights["quadratic"], weights["fast"], rtol=2e-4, atol=2e-5)
  # the sown weights are N(map 1) - lambda N(map 2)
  layer = MultiHeadAttention(num_heads=H, differential=True, implementation="quadratic")
  params = perturbed(jax.jit(layer.init)(jax.random.key(0), x)["params"])
  _, sown = jax.jit(lambda p: layer.apply({"params": p}, x, sow_weights=True,
                                          mutable="intermediates"))(params)
  w = np.asarray(sown["intermediates"]["attention_weights"][0])
  p = jax.tree.map(np.asarray, params)
  lam = (np.exp(p["lambda_q1"] @ p["lambda_k1"]) - np.exp(p["lambda_q2"] @ p["lambda_k2"])
         + lambda_init(1))
  np.testing.assert_allclose(w.sum(-1), 1 - lam, rtol=1e-5)  # each map's rows sum to 1


def test_off_the_params_are_flax_and_each_option_adds_only_its_own():
  x = inputs()
  shapes = lambda module, x=x: jax.tree.map(  # the shapes alone: traced, nothing compiled
      jnp.shape, jax.eval_shape(module.init, jax.random.key(0), x)["params"])
  flax_tree = shapes(nn.MultiHeadDotProductAttention(num_heads=H))
  off = shapes(MultiHeadAttention(num_heads=H))
  assert off == shapes(MultiHeadAttention(num_heads=H, output_gate=None, qk_norm=None,
                                          differential=False))
  assert off == flax_tree
  added = lambda **kw: {k: v for k, v in shapes(MultiHeadAttention(num_heads=H, **kw)).items()
                        if k not in off}
  assert added(output_gate="headwise") == {"gate": {"kernel": (F, H), "bias": (H,)}}
  assert added(output_gate="elementwise") == {"gate": {"kernel": (F, H, 8), "bias": (H, 8)}}
  assert added(qk_norm="rms") == {"query_norm": {"scale": (8,)}, "key_norm": {"scale": (8,)}}
  assert added(qk_norm="layer")["key_norm"] == {"scale": (8,), "bias": (8,)}
  assert added(differential=True) == {"diff_norm": {"scale": (8,)}, "lambda_q1": (4,),
                                      "lambda_k1": (4,), "lambda_q2": (4,), "lambda_k2": (4,)}
  model = SequenceModel(vocab_size=10, max_len=N, d_model=F, num_heads=H, arch="mte")
  tokens = jnp.zeros((1, N), jnp.int32)
  assert shapes(model, tokens) == shapes(SequenceModel(
      vocab_size=10, max_len=N, d_model=F, num_heads=H, arch="mte",
      attention_module=AttentionModuleSpec(output_gate=None, qk_norm=None, differential=False)),
                                 tokens)


def test_gradients_are_finite_and_reach_every_new_parameter():
  x = inputs()
  layer = MultiHeadAttention(num_heads=H, output_gate="headwise", qk_norm="layer",
                             differential=True, head_norm=True, implementation="quadratic")
  params = jax.jit(layer.init)(jax.random.key(0), x)["params"]  # one program, not op by op
  grads = jax.jit(jax.grad(lambda p: jnp.sum(jnp.sin(layer.apply({"params": p}, x)))))(params)
  grads = jax.tree.map(np.asarray, grads)  # checked in numpy, not one program per leaf shape
  assert all(bool(np.all(np.isfinite(g))) for g in jax.tree.leaves(grads))
  for name in ("gate", "query_norm", "key_norm", "diff_norm", "lambda_q1", "lambda_k2"):
    assert any(float(np.abs(g).sum()) > 0 for g in jax.tree.leaves(grads[name])), name


def fit(loss, params, steps=8, lr=3e-3):
  """Adam on ``loss(params)`` for a few steps: (first loss, last loss)."""
  tx = optax.adam(lr)
  state = tx.init(params)

  @jax.jit
  def step(params, state):
    value, grads = jax.value_and_grad(loss)(params)
    updates, state = tx.update(grads, state)
    return optax.apply_updates(params, updates), state, value

  values = []
  for _ in range(steps):
    params, state, value = step(params, state)
    values.append(float(value))
  assert np.all(np.isfinite(values))
  return values[0], values[-1]


ALL_ON = dict(attention_module=AttentionModuleSpec(output_gate="elementwise", qk_norm="rms",
                                                   differential=True))


# bert and mte are the two layouts; nap and non differ from mte by their normalisation only
# (test_differential_applies_another_normalisation_to_both_maps), so they are the slow ones.
@pytest.mark.parametrize("arch", ["bert", "mte", pytest.param("nap", marks=pytest.mark.slow),
                                  pytest.param("non", marks=pytest.mark.slow)])
def test_every_attention_arch_trains_with_the_options(arch):
  model = SequenceModel(vocab_size=10, max_len=8, d_model=F, num_layers=2, num_heads=H,
                        arch=arch, output="classes", num_classes=3, **ALL_ON)
  tokens = jax.random.randint(jax.random.key(0), (8, 8), 0, 10)
  labels = tokens[:, 0] % 3
  params = jax.jit(model.init)(jax.random.key(1), tokens)  # one program, not op by op
  assert {"gate", "query_norm", "diff_norm"} <= set(params["params"]["block_1"]["attention"])

  def loss(p):
    return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, tokens), labels).mean()
  first, last = fit(loss, params)
  assert last < first


def test_bert_trains_with_the_options():
  c = BertConfig(vocab_size=20, hidden_size=F, num_hidden_layers=1, num_attention_heads=H,
                 intermediate_size=16, max_position_embeddings=8)
  model = BertModel(c, add_pooler=True, **ALL_ON)
  ids = jax.random.randint(jax.random.key(0), (4, 6), 0, 20)
  mask = jnp.ones_like(ids).at[:, -1].set(0)
  params = jax.jit(model.init)(jax.random.key(1), ids, mask)  # one program, not op by op
  assert "gate" in params["params"]["layer_0"]["attention"]
  target = jnp.arange(4.0)

  def loss(p):
    pooled = model.apply(p, ids, mask)["pooler_output"]
    return jnp.mean((pooled.sum(-1) - target) ** 2)
  first, last = fit(loss, params)
  assert last < first


def test_albert_trains_with_the_options_and_its_shared_layers_keep_their_depths():
  c = AlbertConfig(vocab_size=20, embedding_size=8, hidden_size=F, num_hidden_layers=2,
                   num_attention_heads=H, intermediate_size=16, max_position_embeddings=8,
                   **ALL_ON)
  model = AlbertForPretraining(c)
  rng = np.random.default_rng(0)
  batch = {"input_ids": rng.integers(0, 20, (4, 6)), "input_mask": np.ones((4, 6), np.int32),
           "segment_ids": np.zeros((4, 6), np.int32),
           "masked_lm_positions": rng.integers(0, 6, (4, 2)),
           "masked_lm_ids": rng.integers(0, 20, (4, 2)),
           "masked_lm_weights": np.ones((4, 2), np.float32),
           "sentence_order_label": rng.integers(0, 2, (4,))}
  params = jax.jit(model.init)(jax.random.key(0), batch)  # one program, not op by op
  attention = params["params"]["albert"]["group_0_inner_0"]["attention"]
  assert {"gate", "query_norm", "key_norm", "diff_norm", "lambda_q1"} <= set(attention)
  first, last = fit(lambda p: pretraining_loss(model.apply(p, batch), batch)[0], params)
  assert last < first
  # the one shared layer, applied at depths 1 and 2, takes lambda_init(1) then lambda_init(2)
  from normattn_jax.models.bert import BertLayer
  layer = BertLayer(c, kernel_init=nn.initializers.normal(0.02), **ALL_ON)
  x = inputs()
  p = jax.jit(layer.init)(jax.random.key(0), x)
  at = lambda depth: jax.jit(lambda p: layer.apply(p, x, layer_index=depth))(p)
  assert not np.allclose(at(1), at(2))


def test_a_block_and_a_sweep_setup_pass_the_options_on():
  block = TransformerBlock(num_heads=H, arch="nap",
                           attention_module=AttentionModuleSpec(qk_norm="layer"), layer_index=3)
  params = jax.eval_shape(block.init, jax.random.key(0), inputs())  # the names alone: traced
  assert set(params["params"]["attention"]) >= {"query_norm"}
  c = config_lib.base_config()
  c.archs = ("mte",)
  c.model.output_gate, c.model.qk_norm, c.model.differential = "headwise", "rms", True
  config_lib.validate(c)
  model = Setup("mte", c).model()
  assert model.attention_module == AttentionModuleSpec("auto", "headwise", "rms", True)
  p = pretrain.base_pretrain_config()
  p.model.output_gate, p.model.qk_norm, p.model.differential = "elementwise", "layer", True
  pretrain.validate_pretrain_config(p)
  albert = pretrain.model_config(p, 100)
  assert albert.attention_module == AttentionModuleSpec("auto", "elementwise", "layer", True)


@pytest.mark.parametrize("make, match", [
    (lambda: MultiHeadAttention(num_heads=2, output_gate="channel"), "output_gate must be one of"),
    (lambda: MultiHeadAttention(num_heads=2, qk_norm="l2"), "qk_norm must be one of"),
    (lambda: MultiHeadAttention(num_heads=2, differential="yes"), "differential must be True"),
    (lambda: MultiHeadAttention(num_heads=2, layer_index=0), "layer_index must be"),
    (lambda: MultiHeadAttention(num_heads=2, qkv_features=6, differential=True),
     "head width must be even, got 3"),
    (lambda: TransformerBlock(arch="sum", attention_module=AttentionModuleSpec(
        output_gate="headwise")), "output_gate='headwise' needs an attention arch"),
    (lambda: SequenceModel(vocab_size=5, max_len=4, d_model=6, num_heads=2,
                           attention_module=AttentionModuleSpec(differential=True)),
     "head width must be even"),
    (lambda: AttentionModuleSpec(qk_norm="x"), r"qk_norm='x': must be one of"),
    (lambda: AttentionModuleSpec(implementation="flash"), r"implementation='flash': must be one"),
    (lambda: AttentionModuleSpec(differential="yes"), r"differential='yes': must be True"),
    (lambda: BertModel(BertConfig(hidden_size=8, num_attention_heads=2),
                       attention_module="quadratic"),
     "attention_module must be an AttentionModuleSpec, got 'quadratic'"),
    (lambda: AlbertConfig(hidden_size=12, num_attention_heads=4,
                          attention_module=AttentionModuleSpec(differential=True)),
     "head width must be even, got 3"),
])
def test_bad_values_are_refused_naming_the_field(make, match):
  with pytest.raises(ValueError, match=match):
    make()


def test_a_differential_head_of_odd_width_is_refused_at_the_call():
  with pytest.raises(ValueError, match="head width must be even, got 3"):
    MultiHeadAttention(num_heads=2, differential=True).init(jax.random.key(0),
                                                           jnp.ones((1, 3, 6)))


@pytest.mark.parametrize("field, value, match", [
    ("model.output_gate", "channel", r"config.model.output_gate='channel': must be one of"),
    ("model.qk_norm", "l2", r"config.model.qk_norm='l2': must be one of"),
    ("model.differential", True, r"config.model.differential=True: applies to attention archs"),
])
def test_bad_sweep_config_values_are_refused_naming_the_field(field, value, match):
  c = config_lib.base_config()  # all six archs: sum and max have no attention
  section, key = field.split(".")
  c[section][key] = value
  with pytest.raises(ValueError, match=match):
    config_lib.validate(c)


def test_an_odd_head_width_is_refused_by_the_configs():
  c = config_lib.base_config()
  c.archs = ("mte",)
  c.model.d_model, c.model.num_heads, c.model.differential = 12, 4, True
  with pytest.raises(ValueError, match=r"config.model.differential=True: .*even head width"):
    config_lib.validate(c)
  p = pretrain.base_pretrain_config()
  p.model.hidden_size, p.model.num_attention_heads, p.model.differential = 48, 16, True
  with pytest.raises(ValueError, match=r"config.model.differential=True: .*even head width"):
    pretrain.validate_pretrain_config(p)
  p.model.differential, p.model.qk_norm = False, "l2"
  with pytest.raises(ValueError, match=r"config.model.qk_norm='l2'"):
    pretrain.validate_pretrain_config(p)
