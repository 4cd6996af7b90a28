"""The Flax BERT encoder against PyTorch transformers (a committed fixture) and its loader."""
import json
import pathlib

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy

from normattn_jax.models import bert

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "minilm_reference.npz"


@pytest.fixture(scope="module")
def minilm():
  path = bert.bundled_minilm_path()
  model, params = bert.from_pretrained(path)
  return path, model, params


@pytest.fixture(scope="module")
def reference():
  return dict(np.load(FIXTURE))


def test_minilm_config(minilm):
  _, model, params = minilm
  c = model.config
  assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads) == (6, 384, 12)
  assert c.layer_norm_eps == 1e-12 and c.hidden_act == "gelu"
  assert params["layer_0"]["attention"]["query"]["kernel"].shape == (384, 12, 32)
  assert params["layer_0"]["attention"]["out"]["kernel"].shape == (12, 32, 384)
  assert model.add_pooler  # the checkpoint has pooler tensors


def test_tokenizer_matches_transformers(minilm, reference):
  path = minilm[0]
  texts = [(a, b) if b else a for a, b in zip(reference["first_texts"].tolist(),
                                              reference["second_texts"].tolist())]
  batch = bert.tokenize(bert.load_tokenizer(path), texts)
  for key in ("input_ids", "attention_mask", "token_type_ids"):
    np.testing.assert_array_equal(batch[key], reference[key], err_msg=key)


def test_hidden_states_match_transformers(minilm, reference):
  _, model, params = minilm
  out = jax.jit(lambda p, ids, m, t: model.apply(
      {"params": p}, ids, attention_mask=m, token_type_ids=t, output_hidden_states=True))(
          params, reference["input_ids"], reference["attention_mask"],
          reference["token_type_ids"])
  hidden = np.stack([np.asarray(h) for h in out["hidden_states"]])
  assert hidden.shape == (7,) + reference["input_ids"].shape + (384,)
  np.testing.assert_array_equal(hidden[-1], np.asarray(out["last_hidden_state"]))
  # Real tokens only: padded queries are masked here, not in transformers (their states differ).
  real = reference["attention_mask"].astype(bool)
  assert np.isfinite(hidden).all()
  stride = int(reference["feature_stride"])
  np.testing.assert_allclose(hidden[..., ::stride][:, real], reference["hidden_strided"][:, real],
                             atol=1e-4, rtol=1e-4)
  projected = hidden.astype(np.float64) @ reference["projections"].astype(np.float64)
  np.testing.assert_allclose(projected[:, real], reference["hidden_projected"][:, real],
                             atol=1e-4, rtol=1e-4)
  assert out["pooler_output"].shape == (3, 384)


def _tiny_checkpoint(folder, prefix="", config_overrides=None, drop=None):
  """A random BERT checkpoint in HuggingFace layout (torch [out, in] weights)."""
  config = dict(model_type="bert", vocab_size=50, hidden_size=16, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=32, max_position_embeddings=20,
                type_vocab_size=2, layer_norm_eps=1e-5, hidden_act="gelu")
  config.update(config_overrides or {})
  rng = np.random.default_rng(0)
  d, f = config["hidden_size"], config["intermediate_size"]
  t = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.3
  tensors = {"embeddings.word_embeddings.weight": t(config["vocab_size"], d),
             "embeddings.position_embeddings.weight": t(config["max_position_embeddings"], d),
             "embeddings.token_type_embeddings.weight": t(2, d),
             "embeddings.LayerNorm.weight": 1 + t(d), "embeddings.LayerNorm.bias": t(d)}
  for layer in range(config["num_hidden_layers"]):
    p = f"encoder.layer.{layer}"
    for name in ("query", "key", "value"):
      tensors[f"{p}.attention.self.{name}.weight"] = t(d, d)
      tensors[f"{p}.attention.self.{name}.bias"] = t(d)
    tensors.update({f"{p}.attention.output.dense.weight": t(d, d),
                    f"{p}.attention.output.dense.bias": t(d),
                    f"{p}.attention.output.LayerNorm.weight": 1 + t(d),
                    f"{p}.attention.output.LayerNorm.bias": t(d),
                    f"{p}.intermediate.dense.weight": t(f, d), f"{p}.intermediate.dense.bias": t(f),
                    f"{p}.output.dense.weight": t(d, f), f"{p}.output.dense.bias": t(d),
                    f"{p}.output.LayerNorm.weight": 1 + t(d), f"{p}.output.LayerNorm.bias": t(d)})
  tensors = {prefix + k: v for k, v in tensors.items() if k != drop}
  if prefix:
    tensors["cls.predictions.bias"] = t(config["vocab_size"])
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "config.json").write_text(json.dumps(config))
  safetensors.numpy.save_file(tensors, str(folder / "model.safetensors"))
  return config, tensors


def numpy_bert(tensors, config, ids, mask, types):
  """BERT written out in numpy from the torch-layout tensors (float64)."""
  from scipy.special import erf

  T = {k: v.astype(np.float64) for k, v in tensors.items()}
  eps, heads = config["layer_norm_eps"], config["num_attention_heads"]

  def ln(x, name):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * T[name + ".weight"] + T[name + ".bias"]

  lin = lambda x, name: x @ T[name + ".weight"].T + T[name + ".bias"]
  n = ids.shape[1]
  x = (T["embeddings.word_embeddings.weight"][ids] + T["embeddings.position_embeddings.weight"][
      np.arange(n)] + T["embeddings.token_type_embeddings.weight"][types])
  x = ln(x, "embeddings.LayerNorm")
  hidden = [x]
  for layer in range(config["num_hidden_layers"]):
    p = f"encoder.layer.{layer}"
    split = lambda y: y.reshape(y.shape[0], n, heads, -1).transpose(0, 2, 1, 3)
    q, k, v = (split(lin(x, f"{p}.attention.self.{m}")) for m in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    scores = np.where(mask[:, None, None, :] > 0, scores, -np.inf)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    ctx = (w @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    x = ln(x + lin(ctx, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
    hmid = lin(x, f"{p}.intermediate.dense")
    hmid = 0.5 * hmid * (1 + erf(hmid / np.sqrt(2)))
    x = ln(x + lin(hmid, f"{p}.output.dense"), f"{p}.output.LayerNorm")
    hidden.append(x)
  return hidden


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_from_pretrained_matches_numpy_reference(tmp_path, prefix):
  config, tensors = _tiny_checkpoint(tmp_path, prefix)
  model, params = bert.from_pretrained(tmp_path)
  assert not model.add_pooler
  rng = np.random.default_rng(1)
  ids = rng.integers(1, 50, (2, 7)).astype(np.int32)
  mask = np.array([[1] * 7, [1] * 5 + [0] * 2], np.int32)
  types = np.array([[0] * 4 + [1] * 3, [0] * 7], np.int32)
  out = jax.jit(lambda p: model.apply(  # one program (op by op: each op compiles)
      {"params": p}, ids, attention_mask=mask, token_type_ids=types,
      output_hidden_states=True))(params)
  plain = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
  expected = numpy_bert(plain, config, ids, mask, types)
  assert len(out["hidden_states"]) == 3
  real = mask.astype(bool)  # the reference masks only the keys: padded states differ
  for got, want in zip(out["hidden_states"], expected):
    np.testing.assert_allclose(np.asarray(got)[real], want[real], atol=2e-5)


# BertModel's padding, outputs and gradients: test_padding.py::test_bert_model; MiniLM on a padded
# batch: test_hidden_states_match_transformers
@pytest.mark.slow
def test_padding_does_not_change_valid_positions(minilm):
  path, model, params = minilm
  tok = bert.load_tokenizer(path)
  alone = bert.tokenize(tok, ["A short line."])
  padded = bert.tokenize(tok, ["A short line.", "A much longer line that forces padding here."])
  run = lambda b: model.apply({"params": params}, b["input_ids"],
                              attention_mask=b["attention_mask"])["last_hidden_state"]
  n = alone["input_ids"].shape[1]
  np.testing.assert_allclose(np.asarray(run(padded))[0, :n], np.asarray(run(alone))[0],
                             atol=1e-5)


def test_sow_weights_are_softmax_rows(minilm):
  _, model, params = minilm
  ids = jnp.array([[101, 7592, 2088, 102, 0]])
  mask = jnp.array([[1, 1, 1, 1, 0]])
  _, state = jax.jit(lambda p: model.apply(  # one program (op by op: each op compiles)
      {"params": p}, ids, attention_mask=mask, sow_weights=True, mutable=["intermediates"]))(
          params)
  w = state["intermediates"]["layer_3"]["attention"]["attention_weights"][0]
  chex.assert_shape(w, (1, 12, 5, 5))
  np.testing.assert_allclose(np.asarray(w[..., :4, :].sum(-1)), 1.0, atol=1e-6)
  assert float(jnp.max(w[..., 4])) == 0.0  # the padding key
  assert float(jnp.max(w[..., 4, :])) == 0.0  # and the padding query


def test_bad_inputs_name_the_argument(tmp_path, minilm):
  with pytest.raises(FileNotFoundError, match="path"):
    bert.from_pretrained(tmp_path / "missing")
  _tiny_checkpoint(tmp_path / "partial", drop="encoder.layer.1.output.dense.bias")
  with pytest.raises(KeyError, match="encoder.layer.1.output.dense.bias"):
    bert.from_pretrained(tmp_path / "partial")
  with pytest.raises(ValueError, match="hidden_act"):
    bert.BertConfig(hidden_act="swishy")
  with pytest.raises(ValueError, match="num_attention_heads"):
    bert.BertConfig(hidden_size=10, num_attention_heads=4)
  _tiny_checkpoint(tmp_path / "roberta", config_overrides={"model_type": "roberta"})
  with pytest.raises(ValueError, match="model_type"):
    bert.from_pretrained(tmp_path / "roberta")
  path, model, params = minilm
  with pytest.raises(ValueError, match="max_position_embeddings"):
    model.apply({"params": params}, jnp.zeros((1, 513), jnp.int32))
  with pytest.raises(ValueError, match="max_length"):
    bert.tokenize(bert.load_tokenizer(path), ["x"], max_length=1)
  with pytest.raises(ValueError, match="texts"):
    bert.tokenize(bert.load_tokenizer(path), "not a list")


@pytest.mark.parametrize("edit, match", [
    ({"num_hidden_layers": 4}, r"32 tensor\(s\) the model does not use:\n"
                               r"  encoder.layer.4.attention.output.LayerNorm.bias\n"),
    ({"hidden_size": 256, "num_attention_heads": 8},
     r"tensor\(s\) of another shape:\n"
     r"  embeddings.LayerNorm.bias: expected \(256,\), found \(384,\)\n"),
])
def test_a_checkpoint_unlike_its_config_names_the_tensors(tmp_path, edit, match):
  source = bert.bundled_minilm_path()
  config = json.loads((source / "config.json").read_text())
  (tmp_path / "config.json").write_text(json.dumps({**config, **edit}))
  (tmp_path / "model.safetensors").symlink_to(source / "model.safetensors")
  with pytest.raises(ValueError, match=match):
    bert.from_pretrained(tmp_path)
