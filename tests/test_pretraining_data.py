"""ALBERT's pre-training data: masking statistics, n-grams, SOP labels, batches, TFDS, vocab."""
import os

import numpy as np
import pytest

from normattn_jax.data import (PretrainingData, Vocab, create_examples, mask_tokens,
                               masking_statistics, prepare_pretraining_data, text_file_sources)
from normattn_jax.data.sentencepiece_vocab import CLS, SEP
from normattn_jax.data.tfds_text import split_of

from helpers.texts import write_corpus


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
  folder = str(tmp_path_factory.mktemp("corpus"))
  files = write_corpus(folder, lines=400)
  vocab, splits = prepare_pretraining_data(
      files, folder, vocab_size=60, max_seq_length=48, max_predictions_per_seq=8,
      dupe_factor=3, validation_fraction=0.2, lines_per_document=8, log=lambda *_: None)
  return folder, files, vocab, splits


def synthetic_documents(num_docs=40, sentences=6, seed=0):
  """Sentence j of document d repeats one marker id, so order can be read back."""
  rng = np.random.default_rng(seed)
  docs = []
  for d in range(num_docs):
    docs.append([[10 + d * sentences + j] * int(rng.integers(3, 9)) for j in range(sentences)])
  return docs


def test_masking_statistics_follow_albert(prepared):
  _, _, vocab, splits = prepared
  arrays = splits["train"].arrays
  stats = masking_statistics(arrays)
  predictions = int(arrays["masked_lm_weights"].sum())
  assert predictions > 1500
  tol = 4 * np.sqrt(0.25 / predictions)
  assert abs(stats["mask_share"] - 0.8) < tol
  assert abs(stats["kept_share"] - 0.1) < tol
  assert abs(stats["random_share"] - 0.1) < tol
  # round(0.15 * len(tokens)) predictions per sequence, len counting [CLS] and [SEP] as ALBERT.
  lengths = arrays["input_mask"].sum(1)
  expected = np.minimum(8, np.maximum(1, np.round(lengths * 0.15)))
  np.testing.assert_array_equal(arrays["masked_lm_weights"].sum(1), expected)
  assert abs(stats["predicted_fraction"] - 0.15) < 0.02


def test_special_tokens_are_never_masked_and_words_stay_whole(prepared):
  _, _, vocab, splits = prepared
  arrays = splits["train"].arrays
  starts = vocab.word_starts()
  for row in range(len(arrays["input_ids"])):
    n = int(arrays["masked_lm_weights"][row].sum())
    positions = arrays["masked_lm_positions"][row, :n]
    labels = arrays["masked_lm_ids"][row, :n]
    assert not np.isin(labels, [CLS, SEP]).any()
    assert np.all(np.diff(positions) > 0)
    original = arrays["input_ids"][row].copy()
    original[positions] = labels
    length = int(arrays["input_mask"][row].sum())
    assert original[0] == CLS and original[length - 1] == SEP
    chosen = set(positions.tolist())
    for p in positions:  # a masked word piece's neighbours within the word are masked too
      if not starts[original[p]]:
        q = p - 1
        while original[q] in (CLS, SEP):  # ALBERT's words run on across [SEP]
          q -= 1
        assert q in chosen
      if p + 1 < length and not starts[original[p + 1]] and original[p + 1] not in (CLS, SEP):
        assert p + 1 in chosen


def test_ngram_lengths_follow_one_over_n():
  rng = np.random.default_rng(0)
  starts = np.ones(50, bool)  # every piece a word
  lengths = []
  for _ in range(150):  # 60 of 5000 tokens masked: spans seldom touch, which would merge runs
    tokens = [CLS] + rng.integers(5, 50, 5000).tolist() + [SEP]
    _, positions, _ = mask_tokens(tokens, starts, rng, masked_lm_prob=0.15,
                                  max_predictions_per_seq=60, ngram=3, vocab_size=50)
    runs = np.split(np.array(positions), np.nonzero(np.diff(positions) > 1)[0] + 1)
    lengths += [len(r) for r in runs[:-3]]  # the last spans may be shortened to fit
  shares = np.bincount(lengths, minlength=4)[1:4] / len(lengths)
  np.testing.assert_allclose(shares, [6 / 11, 3 / 11, 2 / 11], atol=0.03)


def test_sentence_order_labels():
  docs = synthetic_documents()
  arrays = create_examples(docs, 400, np.ones(400, bool), max_seq_length=32, masked_lm_prob=0.0,
                           max_predictions_per_seq=4, dupe_factor=8, seed=3)
  counts = {0: 0, 1: 0}
  for ids, segments, label in zip(arrays["input_ids"], arrays["segment_ids"],
                                  arrays["sentence_order_label"]):
    a = ids[(segments == 0) & ~np.isin(ids, [CLS, SEP, 0])]
    b = ids[(segments == 1) & ~np.isin(ids, [SEP, 0])]
    doc_a, doc_b = (a[0] - 10) // 6, (b[0] - 10) // 6
    if doc_a != doc_b:  # a one-sentence chunk takes B from another document: label 1
      assert label == 1
      continue
    counts[int(label)] += 1
    assert (a.max() < b.min()) if label == 0 else (a.min() > b.max())
  total = counts[0] + counts[1]
  assert total > 300 and abs(counts[1] / total - 0.5) < 4 * np.sqrt(0.25 / total)


def test_examples_are_deterministic_in_the_seed():
  docs = synthetic_documents()
  make = lambda seed: create_examples(docs, 400, np.ones(400, bool), max_seq_length=32,
                                      max_predictions_per_seq=4, seed=seed)
  first, again, other = make(1), make(1), make(2)
  for k in first:
    np.testing.assert_array_equal(first[k], again[k])
  assert not np.array_equal(first["input_ids"], other["input_ids"])
  assert first["input_ids"].dtype == np.int32 and first["masked_lm_weights"].dtype == np.float32


def test_batches_are_pure_cover_each_epoch_and_split_over_processes():
  arrays = {k: v for k, v in create_examples(
      synthetic_documents(), 400, np.ones(400, bool), max_seq_length=32,
      max_predictions_per_seq=4, seed=0).items()}
  arrays["input_ids"][:, -1] = np.arange(len(arrays["input_ids"]))  # row ids to read back
  data = PretrainingData(arrays)
  e, b = data.num_examples, 7
  rows = np.concatenate([data.batch(s, b, seed=5)["input_ids"][:, -1] for s in range(e // b)])
  assert len(set(rows.tolist())) == len(rows)  # no repeat within an epoch
  straddling = data.batch(e // b, b, seed=5)["input_ids"][:, -1]  # crosses into epoch 1
  np.testing.assert_array_equal(straddling, data.batch(e // b, b, seed=5)["input_ids"][:, -1])
  halves = [data.batch(3, 8, seed=5, process_index=i, process_count=2)["input_ids"][:, -1]
            for i in range(2)]
  whole = data.batch(3, 8, seed=5)["input_ids"][:, -1]
  np.testing.assert_array_equal(np.concatenate(halves), whole)
  assert not np.array_equal(data.batch(0, b, seed=5)["input_ids"], data.batch(0, b, seed=6)[
      "input_ids"])
  with pytest.raises(ValueError, match="divisible by the process count"):
    data.batch(0, 7, seed=0, process_count=2)


def test_save_and_load_round_trip(tmp_path):
  data = PretrainingData(create_examples(synthetic_documents(), 400, np.ones(400, bool),
                                         max_seq_length=32, max_predictions_per_seq=4))
  path = str(tmp_path / "examples.npz")
  data.save(path)
  loaded = PretrainingData.load(path)
  for k in data.arrays:
    np.testing.assert_array_equal(loaded.arrays[k], data.arrays[k])


def test_tfds_dataset_round_trip_and_fingerprint(tmp_path):
  files = write_corpus(str(tmp_path), files=1, lines=50)
  sources = text_file_sources(files, str(tmp_path / "tfds"), lines_per_document=5,
                              validation_fraction=0.3)
  docs = {s: [(e["id"].decode(), e["text"].decode()) for e in sources[s]] for s in sources}
  assert sum(len(v) for v in docs.values()) == 10
  for split, items in docs.items():
    assert all(split_of(doc_id, 0.3) == split for doc_id, _ in items)
  lines = [" ".join(l.split()) for l in open(files[0]) if l.strip()]
  texts = sorted((doc_id, text) for items in docs.values() for doc_id, text in items)
  rebuilt = [l for _, text in sorted(texts, key=lambda t: int(t[0].split(":")[1]))
             for l in text.split("\n")]
  assert rebuilt == lines
  with open(files[0], "a") as f:
    f.write("a new line.\n")
  grown = text_file_sources(files, str(tmp_path / "tfds"), lines_per_document=5,
                            validation_fraction=0.3)
  assert sum(len(v) for v in grown.values()) == 11  # a new config, not the stale build


def test_a_corpus_too_small_for_a_split_says_what_to_change(tmp_path):
  files = write_corpus(str(tmp_path), files=1, lines=20)  # 4 documents, none held out
  with pytest.raises(ValueError, match=r"'validation' split would have no document: .*play_0.txt"
                     r".* make 4 document\(s\) of 5 non-empty lines, 0 of them held out.*"
                     r"add text, lower lines_per_document=5 or raise validation_fraction=0.2"):
    text_file_sources(files, str(tmp_path / "tfds"), lines_per_document=5,
                      validation_fraction=0.2)
  with open(files[0], "a") as f:
    f.write("".join(f"line {i}.\n" for i in range(5)))  # a fifth document, held out
  sources = text_file_sources(files, str(tmp_path / "tfds"), lines_per_document=5,
                              validation_fraction=0.2)
  assert (len(sources["train"]), len(sources["validation"])) == (4, 1)
  with pytest.raises(ValueError, match=r"'validation' split has 1 document\(s\), ALBERT's "
                                       r"examples need 2; add text"):
    prepare_pretraining_data(files, str(tmp_path), vocab_size=40, max_seq_length=48,
                             max_predictions_per_seq=8, dupe_factor=1, validation_fraction=0.2,
                             lines_per_document=5, log=lambda *_: None)


def test_vocab_has_albert_special_ids_and_cache_is_reused(prepared):
  folder, files, vocab, _ = prepared
  assert ([vocab.processor.id_to_piece(i) for i in range(5)] ==
          ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"])
  assert vocab.encode(["The KING"])[0] == vocab.encode(["the king"])[0]  # lower-cased
  stamp = os.path.getmtime(vocab.path)
  again, splits = prepare_pretraining_data(
      files, folder, vocab_size=60, max_seq_length=48, max_predictions_per_seq=8,
      dupe_factor=3, validation_fraction=0.2, lines_per_document=8, log=lambda *_: None)
  assert os.path.getmtime(again.path) == stamp
  assert isinstance(again, Vocab) and splits["validation"].num_examples > 0


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_seq_length=4), "max_seq_length"), (dict(masked_lm_prob=1.5), "masked_lm_prob"),
    (dict(ngram=0), "ngram"), (dict(dupe_factor=0), "dupe_factor")])
def test_bad_arguments_name_the_field(kwargs, match):
  with pytest.raises(ValueError, match=match):
    create_examples(synthetic_documents(), 400, np.ones(400, bool), **kwargs)


# a pre-training on text files (TFDS, SentencePiece, examples): tests/helpers/finetuning.py's
# pretrained, in test_finetune's test_pretraining_checkpoint_restores_the_encoder
@pytest.mark.slow
def test_pretraining_runs_on_local_files(tmp_path):
  from normattn_jax.pretrain.train import base_pretrain_config, run_pretraining
  c = base_pretrain_config()
  c.model.update(embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=48)
  c.model.attention.name = "dnas"
  c.data.update(corpus="files", files=tuple(write_corpus(str(tmp_path), lines=400)),
                vocab_size=60, max_seq_length=48, max_predictions_per_seq=8, dupe_factor=1,
                validation_fraction=0.3)
  c.train.update(batch_size=4, num_steps=3, warmup_steps=1, log_every=1, eval_every=3,
                 eval_batches=2, checkpoint_every=0)
  summary = run_pretraining(c, str(tmp_path / "run"), show_progress=False, tensorboard=False)
  assert 5 < summary["vocab_size"] <= 60 and 0 <= summary["mlm_accuracy"] <= 1
