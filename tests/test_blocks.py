"""The six architectures against the paper's equations; padding, vmap, errors."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax import ARCHITECTURES, AttentionSpec, SequenceModel, TransformerBlock
from normattn_jax.attention import weights as W
from normattn_jax.blocks import default_ffn_features

from helpers.params import random_params

D, H, N = 16, 2, 6
# The tests' random numbers come from numpy: jax's generator compiles a program per draw (op by
# op) or long programs (jitted), longer than the models it feeds take.
X = np.random.default_rng(0).standard_normal((2, N, D), np.float32)
PAD = jnp.array([[True] * N, [True] * 4 + [False] * 2])
VARIANTS = [(arch, None) for arch in ARCHITECTURES] + [
    (arch, norm) for arch in ("mte", "bert") for norm in ("dnas", "hnas", "sinkhorn")]


# ----- the paper's equations, written out from the params -----

def ln(x, p, eps=1e-3):
  m = x.mean(-1, keepdims=True)
  v = ((x - m) ** 2).mean(-1, keepdims=True)
  return (x - m) / jnp.sqrt(v + eps) * p["scale"] + p["bias"]


def gelu(x):
  return 0.5 * x * (1 + jnp.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def dense(x, p):
  return x @ p["kernel"] + p["bias"]


def ref_attention(x, p, normalization, normalize, attention_gelu, mask):
  proj = lambda q: jnp.einsum("bnd,dhk->bnhk", x, p[q]["kernel"]) + p[q]["bias"]
  q, k, v = proj("query"), proj("key"), proj("value")
  scale = 1.0 if normalization == "nap" else np.sqrt(D // H)
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / scale
  amask = None if mask is None else mask[:, None, :, None] & mask[:, None, None, :]
  if normalization == "nap":
    a = W.nap_weights(logits, p["nap_gain"][:, None, None], p["nap_bias"][:, None, None], amask)
  elif normalization == "hnas":
    a = W.hnas_weights(logits, p["hybrid_weight"][:, None, None], amask)
  elif normalization == "sinkhorn":
    a = W.sinkhorn_weights(logits, 3, amask)
  else:
    a = {"softmax": W.softmax_weights, "dnas": W.dnas_weights, "non": W.non_weights}[
        normalization](logits, amask)
  hidden = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(x.shape[:2] + (D,))
  if normalize and normalization != "non":
    hidden = ln(hidden, p["head_norm"])
  if attention_gelu:
    hidden = gelu(hidden)
  return jnp.einsum("bqd,de->bqe", hidden, p["out"]["kernel"].reshape(D, D)) + p["out"]["bias"]


def ref_block(x, p, arch, normalization, mask):
  spec = ARCHITECTURES[arch]
  normalization = normalization or spec.normalization
  if spec.mixer == "attention":
    h = ref_attention(x, p["attention"], normalization, spec.normalize, spec.attention_gelu, mask)
  else:
    m = jnp.ones(x.shape[:2], bool) if mask is None else mask
    if spec.mixer == "sum":
      pooled = jnp.where(m[..., None], x, 0).sum(1, keepdims=True)
    else:
      pooled = jnp.where(m[..., None], x, -1e30).max(1, keepdims=True)
    h = jnp.broadcast_to(pooled, x.shape)
  if spec.normalize:  # MTE: p = x + LN(h); x' = p + LN(W2 GELU(LN(W1 p + b1)) + b2)
    q = x + ln(h, p["attention_norm"])
    f = dense(gelu(ln(dense(q, p["ffn_in"]), p["ffn_hidden_norm"])), p["ffn_out"])
    return q + ln(f, p["ffn_norm"])
  q = ln(x + h, p["attention_norm"])  # BERT: p = LN(x + h); x' = LN(p + W2 GELU(W1 p + b1) + b2)
  return ln(q + dense(gelu(dense(q, p["ffn_in"])), p["ffn_out"]), p["ffn_norm"])


def random_tokens(seed, shape, vocab=20):
  return np.random.default_rng(seed).integers(0, vocab, shape, dtype=np.int32)


@pytest.mark.parametrize("arch,normalization", VARIANTS)
@pytest.mark.fast_subset(  # the normalisations' own formulas are test_weights'; HNAS's weight here
    lambda p: p["normalization"] is None or (p["arch"], p["normalization"]) == ("bert", "hnas"))
def test_block_follows_the_papers_equations(arch, normalization):
  block = TransformerBlock(num_heads=H, arch=arch, normalization=normalization)
  params = random_params(block, 2, X)
  if normalization == "hnas":
    params["params"]["attention"]["hybrid_weight"] = jnp.array([0.2, 0.9])
  masks = (None, PAD)
  outputs = jax.jit(lambda p: [(block.apply(p, X, mask),
                                ref_block(X, p["params"], arch, normalization, mask))
                               for mask in masks])(params)
  for mask, (out, ref) in zip(masks, outputs):
    valid = np.ones((2, N), bool) if mask is None else np.asarray(mask)
    np.testing.assert_allclose(np.asarray(out)[valid], np.asarray(ref)[valid], atol=2e-4,
                               rtol=2e-4)


def test_ablation_switches():
  """Table 1: BERT -> +normalize -> +GELU is MTE."""
  mte = TransformerBlock(num_heads=H, arch="mte")
  staged = TransformerBlock(num_heads=H, arch="bert", normalize=True, attention_gelu=True)
  params = random_params(mte, 4, X)
  chex.assert_trees_all_close(*jax.jit(lambda p: (staged.apply(p, X), mte.apply(p, X)))(params))
  assert TransformerBlock(arch="bert", normalize=True).spec.attention_gelu is False


@pytest.mark.parametrize("arch,normalization", VARIANTS)
@pytest.mark.fast_subset(  # the heads on one arch; every arch's padding, its
    lambda p: (p["arch"], p["normalization"]) == ("bert", None))  # gradients too: test_padding's
def test_padding_does_not_change_valid_outputs(arch, normalization):
  tokens = random_tokens(5, (2, 8))
  padded = np.concatenate([tokens, np.full((2, 4), 7, np.int32)], axis=1)
  mask = np.broadcast_to(np.arange(12) < 8, (2, 12))
  for output in ("tokens", "first", "classes"):
    model = SequenceModel(vocab_size=20, max_len=12, d_model=D, num_layers=2, num_heads=H,
                          arch=arch, normalization=normalization, output=output)
    params = random_params(model, 7, padded)
    plain, with_padding = jax.jit(lambda p, model=model: (
        model.apply(p, tokens), model.apply(p, padded, mask)))(params)
    if output == "classes":
      np.testing.assert_allclose(with_padding, plain, atol=1e-4, rtol=1e-4)
    else:
      np.testing.assert_allclose(with_padding[:, :8], plain, atol=1e-4, rtol=1e-4)
      assert (with_padding[:, 8:] < -1e8).all()


def last_block_shape(model, params, tokens, mask):
  """The shape of the last block's output, traced without running."""
  last = f"block_{model.num_layers - 1}"
  _, state = jax.eval_shape(lambda p: model.apply(
      p, tokens, mask, capture_intermediates=lambda m, _: m.name == last,
      mutable=["intermediates"]), params)
  return state["intermediates"][last]["__call__"][0].shape


@pytest.mark.parametrize("output", ["first", "classes"])
@pytest.mark.parametrize("arch,normalization", VARIANTS)
@pytest.mark.fast_subset(  # both layouts and heads, pooling, a normalisation over the queries
    lambda p: (p["arch"], p["normalization"], p["output"]) in (
        ("bert", None, "classes"), ("nap", None, "first"), ("sum", None, "first"),
        ("mte", "dnas", "classes")))
def test_a_first_token_head_computes_the_last_block_at_token_0_alone(arch, normalization,
                                                                     output):
  """The heads that read token 0 (first, classes) give the logits and gradients of every token
  computed (``all_tokens``), with padding, from a last block of one position."""
  tokens = random_tokens(8, (2, 8))
  mask = np.arange(8) < np.array([[8], [5]])
  model = SequenceModel(vocab_size=20, max_len=8, d_model=D, num_layers=2, num_heads=H,
                        arch=arch, normalization=normalization, output=output, num_classes=5)
  params = random_params(model, 10, tokens)
  assert last_block_shape(model, params, tokens, mask) == (2, 1, D)
  if ARCHITECTURES[arch].mixer == "attention":  # the analyses' weights: every query's
    _, sown = jax.eval_shape(lambda p: model.apply(p, tokens, mask, sow_weights=True,
                                                   mutable=["intermediates"]), params)
    weights = sown["intermediates"]["block_1"]["attention"]["attention_weights"][0]
    assert weights.shape == (2, H, 8, 8)

  def logits_and_gradients(p, m):
    def loss(q):
      logits = m.apply(q, tokens, mask)
      return jnp.sum(jnp.tanh(logits)), logits
    return jax.grad(loss, has_aux=True)(p)

  reduced, full = jax.jit(lambda p: (logits_and_gradients(p, model),
                                     logits_and_gradients(p, model.clone(all_tokens=True))))(
                                         params)
  chex.assert_trees_all_close(reduced, full, atol=1e-5, rtol=1e-5)


def count(tree):
  return sum(x.size for x in jax.tree.leaves(tree))


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_parameter_counts(arch):
  """Per layer: attention 4(d^2 + d) (+ per-head NAP gain/bias), LayerNorms 2d each, FFN
  2 d f + f + d (+ 2f for the hidden LayerNorm); pooling has no parameters."""
  d, layers, heads, vocab, length = 128, 2, 4, 100, 128
  spec = ARCHITECTURES[arch]
  f = default_ffn_features(d, spec.mixer)
  per_layer = 2 * d * f + f + d + 2 * d + 2 * d  # FFN, attention_norm, ffn_norm
  if spec.normalize:
    per_layer += 2 * f
  if spec.mixer == "attention":
    per_layer += 4 * (d * d + d)
    per_layer += 2 * d if spec.normalize and spec.normalization != "non" else 0
    per_layer += 2 * heads if spec.normalization == "nap" else 0
  expected = vocab * d + length * d + layers * per_layer + d + 1  # embeddings, blocks, head
  model = SequenceModel(vocab_size=vocab, max_len=length, d_model=d, num_layers=layers,
                        num_heads=heads, arch=arch)
  shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, length), jnp.int32))
  assert count(shapes) == expected
  assert default_ffn_features(8, "sum") == 49 and default_ffn_features(128, "max") == 769


def test_vmap_over_init_and_apply_equals_each_model_alone():
  model = SequenceModel(vocab_size=20, max_len=8, d_model=D, num_layers=1, num_heads=H,
                        arch="nap", output="classes")
  tokens = random_tokens(8, (3, 8))
  keys = jax.random.split(jax.random.key(9), 4)
  stacked = jax.jit(jax.vmap(lambda k: model.init(k, tokens)))(keys)
  assert stacked["params"]["token_embedding"]["embedding"].shape == (4, 20, D)
  outs = np.asarray(jax.jit(jax.vmap(lambda p: model.apply(p, tokens)))(stacked))
  apply_alone = jax.jit(lambda s, i: model.apply(jax.tree.map(lambda a: a[i], s), tokens))
  for i in range(4):  # one program for the four models
    alone = apply_alone(stacked, i)
    np.testing.assert_allclose(outs[i], alone, atol=1e-5, rtol=1e-5)
  assert not np.allclose(outs[0], outs[1])


def test_dropout_is_active_only_when_not_deterministic():
  model = SequenceModel(vocab_size=20, max_len=8, d_model=D, num_layers=1, num_heads=H,
                        dropout_rate=0.5)
  tokens = np.arange(8)[None] % 20
  params = random_params(model, 0, tokens)
  apply = jax.jit(lambda p: model.apply(p, tokens))
  a = apply(params)
  chex.assert_trees_all_close(a, apply(params))
  b = jax.jit(lambda p: model.apply(p, tokens, deterministic=False,
                                    rngs={"dropout": jax.random.key(1)}))(params)
  assert not np.allclose(a, b)


def test_attention_dropout_masks_each_example_and_head():
  """The NAP code drops attention weights with Keras' Dropout: one mask per element, so two equal
  examples get different attention outputs (a mask shared by the batch would give equal ones)."""
  block = TransformerBlock(arch="bert", num_heads=H, dropout_rate=0.5)
  x = np.broadcast_to(X[:1], X.shape)
  params = random_params(block, 0, x)
  _, state = jax.jit(lambda p: block.apply(p, x, deterministic=False,
                                           rngs={"dropout": jax.random.key(1)},
                                           capture_intermediates=True))(params)
  (attention,) = state["intermediates"]["attention"]["__call__"]
  assert not np.allclose(attention[0], attention[1])


def test_bad_arguments_name_the_field():
  with pytest.raises(ValueError, match="arch"):
    TransformerBlock(arch="gpt")
  with pytest.raises(ValueError, match="normalization"):
    TransformerBlock(arch="sum", normalization="dnas")
  with pytest.raises(ValueError, match="normalization"):
    TransformerBlock(arch="mte", normalization="entmax")
  with pytest.raises(ValueError, match="hybrid_init"):
    TransformerBlock(arch="mte", normalization=AttentionSpec("hnas", {"hybrid_init": -0.1}))
  with pytest.raises(ValueError, match="sinkhorn_iters"):
    TransformerBlock(arch="mte", normalization=AttentionSpec("sinkhorn", {"sinkhorn_iters": 0}))
  with pytest.raises(ValueError, match="num_heads"):
    SequenceModel(vocab_size=10, max_len=8, d_model=16, num_heads=3)
  with pytest.raises(ValueError, match="num_heads"):
    TransformerBlock(num_heads=3).init(jax.random.key(0), X)
  with pytest.raises(ValueError, match="output"):
    SequenceModel(vocab_size=10, max_len=8, output="last")
  with pytest.raises(ValueError, match="max_len"):
    model = SequenceModel(vocab_size=10, max_len=4, d_model=16)
    model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
