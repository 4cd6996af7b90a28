"""The norm-based decomposition of the attention block: exactness, definitions, MiniLM's Table 2."""
import pathlib

import jax
import numpy as np
import pytest

from normattn_jax import SequenceModel
from normattn_jax.analysis import mixing as mx
from normattn_jax.attention import AttentionModuleSpec
from normattn_jax.models import bert

from helpers.params import random_params

SAMPLE = pathlib.Path(__file__).resolve().parent.parent / "data" / "sample_text.txt"


@pytest.fixture(scope="module")
def minilm():
  path = bert.bundled_minilm_path()
  model, params = bert.from_pretrained(path)
  return model, params, bert.load_tokenizer(path)


@pytest.fixture(scope="module")
def minilm_blocks(minilm):
  model, params, tok = minilm
  batch = bert.tokenize(tok, ["The cat sat on the mat, and the dog slept by the door.",
                              ("Where is the station?", "It is near the old bridge.")])
  # the blocks of one program, as analyze_bert traces them (trace_attention_blocks runs the
  # model op by op: test_project_models_with_the_bert_layout, the token figure's test)
  blocks, residuals = jax.jit(lambda p, b: mx._collect(
      model, {"params": p}, b["input_ids"], attention_mask=b["attention_mask"],
      token_type_ids=b["token_type_ids"]))(params, batch)
  mx._check_post_ln(blocks, residuals, 1e-3)
  return blocks, batch


def numpy_block_ratios(block, b, valid):
  """The five ratios of sequence ``b``'s first ``valid`` tokens (the others are padding)
  written out token by token in float64 from the paper's equations, independent of
  ``mixing.py``'s vectorised code."""
  a = lambda t: np.asarray(t, np.float64)
  x, w, y = a(block.x[b]), a(block.weights[b]), a(block.ln_input[b])
  wv, bv, wo = a(block.value_kernel), a(block.value_bias), a(block.out_kernel)
  gamma, eps = a(block.ln_scale), block.ln_epsilon
  h = w.shape[0]
  f = np.stack([(x @ wv[:, k] + bv[k]) @ wo[k] for k in range(h)])       # [h, n, d]
  n = x.shape[0]
  out = {m: np.zeros(valid) for m in mx.METHODS}
  for i in range(valid):
    s = np.sqrt(np.var(y[i]) + eps)
    g = lambda z: (z - z.mean()) / s * gamma
    terms = [sum(w[k, i, j] * f[k, j] for k in range(h)) for j in range(n)]
    mix = sum(terms[j] for j in range(n) if j != i)
    own = terms[i]
    nrm = np.linalg.norm
    out["ATTN-W"][i] = np.mean([w[k, i].sum() - w[k, i, i] for k in range(h)])
    out["ATTN-N"][i] = nrm(mix) / (nrm(mix) + nrm(own))
    out["ATTNRES-W"][i] = np.mean([0.5 * (w[k, i].sum() - w[k, i, i]) / (0.5 * w[k, i].sum()
                                                                          + 0.5)
                                   for k in range(h)])
    out["ATTNRES-N"][i] = nrm(mix) / (nrm(mix) + nrm(own + x[i]))
    out["ATTNRESLN-N"][i] = nrm(g(mix)) / (nrm(g(mix)) + nrm(g(own) + g(x[i])))
  return out


def numpy_tree(tree):
  """The arrays of ``tree`` as numpy arrays: the checks' own arithmetic then compiles nothing."""
  return jax.tree.map(np.asarray, tree)


def test_decomposition_sums_to_the_real_block_output(minilm_blocks):
  blocks, batch = minilm_blocks
  assert [b.name for b in blocks] == [f"layer_{i}" for i in range(6)]
  analyse = jax.jit(lambda block: (mx.decompose(block),  # one program for the six blocks
                                   [mx.token_contributions(block, b) for b in range(2)]))
  for block in blocks:
    parts, contributions = numpy_tree(analyse(block))
    block = numpy_tree(block)
    # The per-token vectors add up to the real LN output minus beta and b_O's share.
    target = block.ln_output - parts["bias"]
    np.testing.assert_allclose(parts["mixing"] + parts["preserving"], target, atol=2e-5)
    assert float(np.max(np.abs(parts["bias"] - block.ln_bias))) > 1e-3  # b_O's share is real
    # ATTN alone: the attention output minus b_O.
    np.testing.assert_allclose(parts["attn_mixing"] + parts["attn_self"],
                               block.attention_output - block.out_bias, atol=2e-5)
    for b, contrib in enumerate(contributions):
      n = int(batch["attention_mask"][b].sum())
      np.testing.assert_allclose(contrib["block"].sum(1), target[b], atol=2e-5)
      # The diagonal is the preserving vector, the rest the mixing vector.
      np.testing.assert_allclose(np.diagonal(contrib["block"], 0, 0, 1).T,
                                 parts["preserving"][b], atol=2e-5)
      if n < contrib["attention"].shape[1]:
        assert float(np.max(np.abs(contrib["attention"][:, n:]))) == 0.0  # padding keys


def test_ratios_match_a_token_by_token_reference(minilm_blocks):
  blocks, batch = minilm_blocks
  mixing_ratios = jax.jit(mx.mixing_ratios)  # one program for both blocks
  for block in (blocks[0], blocks[4]):
    ratios = mixing_ratios(block)
    for b in range(2):
      n = int(batch["attention_mask"][b].sum())
      want = numpy_block_ratios(block, b, n)
      for method in mx.METHODS:
        np.testing.assert_allclose(np.asarray(ratios[method][b, :n]), want[method],
                                   atol=1e-5, err_msg=method)
        assert np.all((np.asarray(ratios[method]) >= 0) & (np.asarray(ratios[method]) <= 1))
    np.testing.assert_allclose(np.asarray(ratios["ATTNRES-W"]),
                               0.5 * np.asarray(ratios["ATTN-W"]), atol=1e-6)


def test_expansion_rate_is_rms_singular_value(minilm_blocks):
  block = minilm_blocks[0][2]
  d = block.x.shape[-1]
  rate = mx.expansion_rate(block.value_kernel, block.value_bias, block.out_kernel)
  # sum sigma^2 is the squared Frobenius norm of [[W_V W_O, 0], [b_V W_O, 1]].
  wv = np.asarray(block.value_kernel, np.float64).reshape(d, d)
  wo = np.asarray(block.out_kernel, np.float64).reshape(d, d)
  bv = np.asarray(block.value_bias, np.float64).reshape(d)
  frob2 = np.sum((wv @ wo) ** 2) + np.sum((bv @ wo) ** 2) + 1.0
  assert rate == pytest.approx(np.sqrt(frob2 / (d + 1)), rel=1e-9)
  # A pure scaling c * I with no bias has rate sqrt((d c^2 + 1) / (d + 1)).
  c, k = 0.5, 6
  eye = np.eye(k).reshape(k, 2, 3)
  got = mx.expansion_rate(eye * c, np.zeros((2, 3)), np.eye(k).reshape(2, 3, k))
  assert got == pytest.approx(np.sqrt((k * c ** 2 + 1) / (k + 1)))


def test_table2_ordering_on_minilm(minilm):
  model, params, tok = minilm
  texts = [line.strip() for line in SAMPLE.read_text().splitlines() if line.strip()][:12]
  result = mx.analyze_bert(model, params, tok, texts, batch_size=12)
  overall = result["summary"]["overall"]
  means = [overall[m]["mean"] for m in mx.METHODS]
  assert means == sorted(means, reverse=True), means  # ATTN-W > ATTN-N > ... > ATTNRESLN-N
  assert len(set(means)) == 5
  assert overall["ATTNRES-W"]["max"] <= 0.5
  assert result["num_masked"] > 0
  per_type = result["summary"]["per_layer_token_type"]["ATTNRESLN-N"]
  assert all(v is not None for v in per_type["[MASK]"])
  assert len(result["summary"]["per_layer"]["ATTN-N"]) == 6
  assert len(result["expansion_rate"]["per_layer"]) == 6
  rho = result["frequency_spearman"]
  assert set(rho) == set(mx.METHODS) and rho["ATTNRESLN-N"]["tokens"] > 50


def test_summarize_counts_every_valid_token_once_per_layer():
  ratios = [{m: np.array([[0.1, 0.2, 0.9], [0.3, 0.0, 0.0]]) for m in mx.METHODS},
            {m: np.array([[0.5, 0.4, 0.9], [0.6, 0.0, 0.0]]) for m in mx.METHODS}]
  valid = np.array([[1, 1, 0], [1, 0, 0]], bool)
  types = np.array([[2, 0, 0], [1, 0, 0]])
  s = mx.summarise(ratios, valid, types)
  assert s["per_layer"]["ATTN-N"] == pytest.approx([0.2, 0.5])
  assert s["overall"]["ATTN-N"] == pytest.approx({"mean": 0.35, "max": 0.6, "min": 0.1})
  by_type = s["per_layer_token_type"]["ATTN-N"]
  assert by_type["[CLS]"] == pytest.approx([0.1, 0.5])
  assert by_type["[MASK]"] == pytest.approx([0.3, 0.6])
  assert by_type["[SEP]"] == [None, None]
  assert s["token_counts"] == {"normal": 1, "[MASK]": 1, "[CLS]": 1, "[SEP]": 0}
  with pytest.raises(ValueError, match="valid"):
    mx.summarise(ratios, np.zeros_like(valid), types)


def test_mask_tokens_follows_the_rates():
  ids = np.tile(np.arange(1, 41), (200, 1))
  ids[:, 0], ids[:, -1] = 101, 102
  mask = np.ones_like(ids)
  mask[:, 30:] = 0
  out = mx.mask_tokens(ids, mask, mask_id=103, special_ids=[101, 102], rate=0.15, seed=3)
  changed = out != ids
  assert not changed[:, 0].any() and not changed[:, 30:].any()  # specials and padding stay
  assert np.all(out[changed] == 103)
  # 29 ordinary tokens: round(0.15 * 29) = 4 chosen per row, each masked with probability 0.8.
  assert np.all(changed.sum(1) <= 4)
  assert changed.sum() / (4 * 200) == pytest.approx(0.8, abs=0.05)
  np.testing.assert_array_equal(out, mx.mask_tokens(ids, mask, mask_id=103,
                                                    special_ids=[101, 102], seed=3))
  with pytest.raises(ValueError, match="rate"):
    mx.mask_tokens(ids, mask, mask_id=103, special_ids=[], rate=1.5)


def test_the_authors_protocol_masks_floor_of_12_percent_per_sequence():
  ids = np.tile(np.arange(1, 41), (100, 1))
  ids[:, 0], ids[:, -1] = 101, 102
  mask = np.ones_like(ids)
  mask[50:, 7:] = 0   # rows 50..99: 6 ordinary tokens, floor(0.72) = 0 -> at least 1
  authors = mx.get_protocol("authors")
  out = mx.mask_tokens(ids, mask, mask_id=103, special_ids=[101, 102], rate=authors.mask_rate,
                       mask_prob=authors.mask_prob, count_rounding=authors.count_rounding, seed=1)
  changed = out != ids
  # 38 ordinary tokens: floor(0.12 * 38) = 4 (round would give 5), every one of them [MASK].
  np.testing.assert_array_equal(changed.sum(1), [4] * 50 + [1] * 50)
  assert np.all(out[changed] == 103) and not changed[:, [0, -1]].any()
  assert not changed[50:, 7:].any()
  paper = mx.get_protocol("paper")
  assert mx.masked_count(38, paper.mask_rate, paper.count_rounding) == 6  # round(5.7)
  assert [mx.masked_count(m, 0.12, "floor") for m in (0, 1, 8, 9, 17, 100)] == [0, 1, 1, 1, 2, 12]
  assert mx.masked_count(10, 0.0, "floor") == 0
  with pytest.raises(ValueError, match="count_rounding"):
    mx.mask_tokens(ids, mask, mask_id=103, special_ids=[], count_rounding="ceil")
  with pytest.raises(ValueError, match="protocol"):
    mx.get_protocol("mine")


def test_per_sequence_means_weigh_sentences_equally():
  # Sentence 0 has three valid tokens, sentence 1 one; [MASK] (code 1) only in sentence 0.
  r = np.array([[0.1, 0.2, 0.6, 0.9], [0.5, 0.0, 0.0, 0.0]])
  ratios = [{m: r for m in mx.METHODS}]
  valid = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], bool)
  types = np.array([[2, 1, 0, 0], [2, 0, 0, 0]])
  tokens = mx.summarise(ratios, valid, types)
  sentences = mx.summarise(ratios, valid, types, per_sequence=True)
  assert tokens["per_layer"]["ATTN-N"] == pytest.approx([(0.1 + 0.2 + 0.6 + 0.5) / 4])
  assert sentences["per_layer"]["ATTN-N"] == pytest.approx([(0.3 + 0.5) / 2])
  by_type = sentences["per_layer_token_type"]["ATTN-N"]
  assert by_type["[CLS]"] == pytest.approx([0.3])          # (0.1 + 0.5) / 2 either way
  assert by_type["[MASK]"] == pytest.approx([0.2])         # only sentences that have one
  assert by_type["[SEP]"] == [None]
  # Table 2 counts every token once under both protocols.
  assert sentences["overall"] == tokens["overall"]
  assert sentences["per_sequence_means"] and not tokens["per_sequence_means"]
  with pytest.raises(ValueError, match="per_sequence"):
    mx.summarise([{m: r.ravel() for m in mx.METHODS}], valid.ravel(), types.ravel(),
                  per_sequence=True)


def test_analyze_bert_checks_the_protocol_before_running(minilm):
  model, params, tok = minilm
  with pytest.raises(ValueError, match="protocol must be one of"):
    mx.analyze_bert(model, params, tok, ["a text"], protocol="mine")
  with pytest.raises(ValueError, match="mask_rate"):
    mx.analyze_bert(model, params, tok, ["a text"], protocol="authors", mask_rate=1.5)


def test_frequency_ranks_and_correlation():
  ranks = mx.frequency_ranks(["the", "cat", "zyx", "a"], {"the": 0.05, "a": 0.05, "cat": 1e-4})
  np.testing.assert_array_equal(ranks[[0, 1, 3]], [1, 3, 1])
  assert np.isnan(ranks[2])
  r = np.array([[0.1, 0.2, 0.3, 0.4, 0.9]])
  ratios = [{m: r for m in mx.METHODS}]
  valid = np.ones_like(r, bool)
  special = np.array([[False] * 4 + [True]])
  rho = mx.frequency_correlation(ratios, np.array([[1, 2, 3, 4, 1]]), valid, special)
  assert rho["ATTN-N"]["without_special"] == pytest.approx(1.0)
  assert rho["ATTN-N"]["with_special"] < 1.0


@pytest.mark.parametrize("normalization", ["softmax", "dnas", "nap"])
@pytest.mark.fast_subset(lambda p: p["normalization"] == "dnas")
def test_project_models_with_the_bert_layout(normalization):
  # a head that reads token 0 alone: its last block still traced at every token
  model = SequenceModel(vocab_size=11, max_len=9, d_model=16, num_layers=2, num_heads=4,
                        arch="bert", normalization=normalization, layer_norm_epsilon=1e-3,
                        output="first",
                        attention_module=AttentionModuleSpec(implementation="quadratic"))
  tokens = np.random.default_rng(0).integers(0, 11, (3, 9), dtype=np.int32)
  mask = np.arange(9)[None, :] < np.array([[9], [7], [5]])
  blocks = mx.trace_attention_blocks(model, random_params(model, 1, tokens, mask), tokens, mask)
  assert [b.name for b in blocks] == ["block_0", "block_1"]
  analyse = jax.jit(lambda block: (mx.decompose(block), mx.mixing_ratios(block)))
  for block in blocks:
    parts, ratios = numpy_tree(analyse(block))  # one program for both blocks
    np.testing.assert_allclose(parts["mixing"] + parts["preserving"] + parts["bias"],
                               np.asarray(block.ln_output), atol=1e-5)
    valid = np.asarray(mask)
    for method in mx.METHODS:
      values = np.asarray(ratios[method])[valid]
      assert np.all(np.isfinite(values)) and np.all((values >= 0) & (values <= 1)), method


def test_mte_layout_is_rejected_with_the_block_name():
  model = SequenceModel(vocab_size=11, max_len=8, d_model=16, num_layers=1, num_heads=4,
                        arch="mte",
                        attention_module=AttentionModuleSpec(implementation="quadratic"))
  tokens = np.zeros((1, 8), np.int32)
  variables = random_params(model, 0, tokens)
  with pytest.raises(ValueError, match="block_0.*post-LN"):
    mx.trace_attention_blocks(model, variables, tokens)


def test_token_type_codes():
  codes = mx.token_type_codes(np.array([[101, 5, 103, 102, 0]]),
                              {"[CLS]": 101, "[SEP]": 102, "[MASK]": 103})
  np.testing.assert_array_equal(codes, [[2, 0, 1, 3, 0]])
  with pytest.raises(ValueError, match="special_ids"):
    mx.token_type_codes(np.zeros((1, 2)), {"[BOS]": 1})


def test_read_texts_takes_a_sequence_or_a_pair_per_line(tmp_path):
  path = tmp_path / "texts.txt"
  path.write_text("One sentence.\n\nFirst half.\tSecond half.\n")
  assert mx.read_texts(str(path)) == ["One sentence.", ("First half.", "Second half.")]
  path.write_text("a\tb\tc\n")
  with pytest.raises(ValueError, match="3 tab-separated parts"):
    mx.read_texts(str(path))
  path.write_text("\n\n")
  with pytest.raises(ValueError, match="no non-empty line"):
    mx.read_texts(str(path))
  with pytest.raises(FileNotFoundError, match="--text_file"):
    mx.read_texts(str(tmp_path / "missing.txt"))


def test_the_token_figures_shares_are_each_rows_contribution_norms(minilm):
  model, params, tok = minilm
  tokens, shares = mx.token_contribution_shares(model, params, tok, "The cat sat.")
  assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and len(shares) == 6
  batch = bert.tokenize(tok, ["The cat sat."])
  block = mx.trace_attention_blocks(model, {"params": params}, batch["input_ids"],
                                    attention_mask=batch["attention_mask"],
                                    token_type_ids=batch["token_type_ids"])[2]
  norms = np.linalg.norm(np.asarray(mx.token_contributions(block)["block"], np.float64), axis=-1)
  np.testing.assert_allclose(shares[2]["block"], norms / norms.sum(1, keepdims=True))
  np.testing.assert_allclose(shares[0]["attention"].sum(1), 1.0)


def test_the_run_record_and_table_lines_of_a_result():
  result = {"summary": {"overall": {m: {"mean": 0.5, "max": 0.9, "min": 0.1} for m in mx.METHODS},
                        "per_sequence_means": False, "per_layer": {}, "per_layer_token_type": {},
                        "token_counts": []},
            "expansion_rate": {"mean": 1.5, "min": 1.0, "max": 2.0, "per_layer": [1.0, 2.0]},
            "frequency_spearman": None, "mask_rate": 0.15, "mask_prob": 0.8,
            "count_rounding": "round", "num_sequences": 2, "num_tokens": 20, "num_masked": 3}
  config = bert.BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=16)
  record = mx.run_record(result, config, model="m", text_file="t.txt", protocol="paper", seed=1)
  assert (record["num_layers"], record["hidden_size"], record["num_heads"]) == (2, 8, 2)
  assert record["overall"] == result["summary"]["overall"] and record["seed"] == 1
  lines = mx.table_lines(result)
  assert lines[1] == "ATTN-W         50.0   90.0   10.0        "
  assert lines[-1] == "expansion rate: mean 1.50, min 1.00, max 2.00; per layer 1.00, 2.00"
  assert mx.output_names("authors") == {"mixing": "mixing_authors.json",
                                        "mixing_layers": "mixing_layers_authors.png",
                                        "mixing_tokens": "mixing_tokens.png"}
