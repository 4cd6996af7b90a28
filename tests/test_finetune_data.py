"""Downstream features: hand-written examples through both tokenizers (pairs, truncation, SQuAD
windows with stride, RACE choices), and the TFDS pipelines of GLUE, SQuAD and RACE run offline
through ``tfds.testing.mock_data`` on the real builders."""
import re
from unittest import mock

import numpy as np
import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from tensorflow_datasets.testing import mocking  # noqa: E402

from normattn_jax.data import train_sentencepiece  # noqa: E402
from normattn_jax.data.sentencepiece_vocab import CLS, PAD, SEP  # noqa: E402
from normattn_jax.finetune import features, metrics, tfds_tasks  # noqa: E402
from normattn_jax.finetune.features import SquadExample  # noqa: E402
from normattn_jax.models import bert  # noqa: E402

WORDS = ("the king queen castle night sword crown river storm ghost letter garden wine honour "
         "battle daughter father mother brother sister friend enemy heart tongue gold lay by "
         "rode to at a came where is who of").split()
CONTEXT = ("The King rode to the castle at night. The Queen rode to the river at night. "
           "A storm came to the garden. The ghost of the father came by night. "
           "The Crown of Gold lay by the river. The sword lay by the castle.")
ANSWER = "Crown of Gold"


@pytest.fixture(scope="module")
def wordpiece():
  return features.as_tokenizer(bert.bundled_minilm_path())


@pytest.fixture(scope="module")
def sentencepiece(tmp_path_factory):
  rng = np.random.default_rng(0)
  sentences = [" ".join(rng.choice(WORDS, 9)) + "." for _ in range(400)]
  path = tmp_path_factory.mktemp("spm") / "spm.model"
  return features.as_tokenizer(train_sentencepiece(sentences, str(path), 70).path)


@pytest.fixture(params=["wordpiece", "sentencepiece"])
def tokenizer(request):
  return request.getfixturevalue(request.param)


# ----- tokenizers -----

def test_offsets_point_at_the_characters_of_each_token(sentencepiece, wordpiece):
  text = "  The KING rode, by night!"
  for tokenizer in (sentencepiece, wordpiece):
    ((ids, offsets),) = tokenizer.encode_with_offsets([text])
    assert ids == tokenizer.encode([text])[0]
    assert (np.diff(offsets[:, 0]) >= 0).all() and (offsets[:, 1] >= offsets[:, 0]).all()
    covered = "".join(text[a:b] for a, b in offsets)
    assert covered == "".join(text.split())  # every character but whitespace, once
  pieces = [sentencepiece.processor.id_to_piece(i) for i in sentencepiece.encode([text])[0]]
  ((_, offsets),) = sentencepiece.encode_with_offsets([text])
  for piece, (a, b) in zip(pieces, offsets):
    if piece != "<unk>":
      assert text[a:b].lower() == piece.lstrip("\u2581")


def test_as_tokenizer_accepts_paths_and_objects(wordpiece, sentencepiece):
  assert isinstance(features.as_tokenizer(bert.load_tokenizer(bert.bundled_minilm_path())),
                    features.WordPieceTokenizer)
  assert isinstance(features.as_tokenizer(sentencepiece.vocab), features.SentencePieceTokenizer)
  assert features.as_tokenizer(wordpiece) is wordpiece
  assert (sentencepiece.cls_id, sentencepiece.sep_id, sentencepiece.pad_id) == (CLS, SEP, PAD)
  with pytest.raises(ValueError, match="neither a SentencePiece"):
    features.as_tokenizer("/nowhere")
  with pytest.raises(ValueError, match="tokenizer must be"):
    features.as_tokenizer(3)


# ----- sentences and pairs -----

def test_pairs_match_the_huggingface_template(wordpiece):
  first, second = ["The king rode by night.", "A storm!"], ["The queen.", "Gold lay by the river"]
  built = features.classification_features(wordpiece, first, second, [1, 0], 24, num_labels=2)
  reference = bert.tokenize(wordpiece.tokenizer, list(zip(first, second)), max_length=24)
  width = reference["input_ids"].shape[1]
  for name in features.INPUT_FIELDS:
    assert built[name].dtype == np.int32 and built[name].shape == (2, 24)
    np.testing.assert_array_equal(built[name][:, :width], reference[name])
    np.testing.assert_array_equal(built[name][:, width:], 0)
  np.testing.assert_array_equal(built["label"], [1, 0])
  assert built["label"].dtype == np.int32


def test_albert_layout_and_truncation_of_long_pairs(sentencepiece):
  a = "the king rode to the castle at night and the queen rode to the river"
  b = "gold"
  built = features.classification_features(sentencepiece, [a, "storm"], [b, "wine"],
                                           [0.5, 4.0], 12, regression=True)
  ids_a, ids_b = sentencepiece.encode([a, b])
  assert len(ids_a) > 12
  kept_a, kept_b = features.truncate_pair(ids_a, ids_b, 12 - 3)
  assert kept_a == ids_a[:12 - 3 - len(ids_b)] and kept_b == ids_b  # the longer side loses
  np.testing.assert_array_equal(built["input_ids"][0],
                                [CLS, *kept_a, SEP, *kept_b, SEP])
  np.testing.assert_array_equal(built["token_type_ids"][0],
                                [0] * (len(kept_a) + 2) + [1] * (len(kept_b) + 1))
  np.testing.assert_array_equal(built["attention_mask"][1], (built["input_ids"][1] != PAD))
  assert built["label"].dtype == np.float32
  np.testing.assert_allclose(built["label"], [0.5, 4.0])
  # a tie pops the second side; single sentences keep their first L - 2 tokens
  assert features.truncate_pair([1, 2, 3], [4, 5, 6], 5) == ([1, 2, 3], [4, 5])
  assert features.truncate_pair([1, 2, 3, 4], [5, 6], 3) == ([1, 2], [5])
  single = features.classification_features(sentencepiece, [a], None, [1], 8)
  np.testing.assert_array_equal(single["input_ids"][0], [CLS, *ids_a[:6], SEP])
  assert not single["token_type_ids"].any()


def test_bad_classification_input_is_named(wordpiece):
  with pytest.raises(ValueError, match="max_seq_length must be an integer >= 5, got 4"):
    features.classification_features(wordpiece, ["a"], ["b"], [0], 4)
  with pytest.raises(ValueError, match="labels must be >= -1.*num_labels=2, got 2"):
    features.classification_features(wordpiece, ["a"], None, [2], 8, num_labels=2)
  with pytest.raises(ValueError, match="first and second must have one text per example"):
    features.classification_features(wordpiece, ["a", "b"], ["c"], [0, 1], 8)
  with pytest.raises(ValueError, match="regression labels must be finite"):
    features.classification_features(wordpiece, ["a"], None, [np.nan], 8, regression=True)
  with pytest.raises(ValueError, match="first must be a sequence of texts"):
    features.classification_features(wordpiece, "a", None, [0], 8)


# ----- SQuAD windows -----

def answer_text(built, row, example):
  offsets = built["offset_mapping"][row]
  return example.context[offsets[built["start_positions"][row], 0]:
                         offsets[built["end_positions"][row], 1]]


def test_long_context_windows_with_stride_and_the_answer_in_a_later_one(tokenizer):
  question = "Where is the crown of the king who rode by night to the castle?"
  example = SquadExample("q1", question, CONTEXT, (ANSWER,), (CONTEXT.index(ANSWER),))
  length, stride, max_query = 32, 8, 6
  built = features.span_features(tokenizer, [example], length, doc_stride=stride,
                                 max_query_length=max_query, is_training=False)
  ((context_ids, offsets),) = tokenizer.encode_with_offsets([CONTEXT])
  query = tokenizer.encode([question])[0][:max_query]
  room = length - 3 - len(query)
  starts = list(range(0, len(context_ids) - room, stride)) + [None]
  windows = len(built["input_ids"])
  assert windows == len(starts) > 2
  for w in range(windows):
    start = w * stride
    ids = built["input_ids"][w]
    assert ids[0] == tokenizer.cls_id and list(ids[1:1 + len(query)]) == query
    window_ids = context_ids[start:start + room]
    np.testing.assert_array_equal(ids[len(query) + 2:len(query) + 2 + len(window_ids)],
                                  window_ids)
    assert (built["token_type_ids"][w] == 1).sum() == len(window_ids) + 1
    np.testing.assert_array_equal(
        built["offset_mapping"][w][built["token_is_context"][w] == 1],
        offsets[start:start + len(window_ids)])
  has_answer = built["is_impossible"] == 0
  assert not has_answer[0] and has_answer.any()  # the answer is not in the first window
  for w in range(windows):
    if has_answer[w]:
      assert answer_text(built, w, example) == ANSWER
    else:
      assert built["start_positions"][w] == built["end_positions"][w] == 0
  # each context token is a "max context" token of exactly one window
  assert built["token_is_max_context"].sum() == len(context_ids)
  assert ((built["token_is_max_context"] == 1) <= (built["token_is_context"] == 1)).all()


def test_windows_decode_back_to_the_answer(tokenizer):
  examples = [SquadExample("q1", "where is the crown?", CONTEXT, (ANSWER, "The Crown"),
                           (CONTEXT.index(ANSWER), CONTEXT.index("The Crown"))),
              SquadExample("q2", "who rode?", CONTEXT, (), (), is_impossible=True)]
  built = features.span_features(tokenizer, examples, 28, doc_stride=6, max_query_length=8,
                                 is_training=False)
  gold = np.arange(28) == built["start_positions"][:, None]
  start_logits = np.where(gold, 4.0, 0.0)
  end_logits = np.where(np.arange(28) == built["end_positions"][:, None], 4.0, 0.0)
  predictions = metrics.decode_spans(start_logits, end_logits, built,
                                     [e.context for e in examples])
  assert predictions[0].text == ANSWER  # the context's own characters, capitals included
  texts = metrics.answer_texts(predictions, "v2.0")
  assert texts == [ANSWER, ""]
  assert metrics.squad_scores({"q1": texts[0], "q2": texts[1]},
                              {"q1": examples[0].answers, "q2": []}) == {
      "exact_match": 1.0, "f1": 1.0, "has_answer_exact_match": 1.0, "has_answer_f1": 1.0,
      "no_answer_exact_match": 1.0, "no_answer_f1": 1.0}


def test_no_answer_and_misaligned_answers(wordpiece):
  impossible = SquadExample("q2", "who?", CONTEXT, (), (), is_impossible=True)
  misaligned = SquadExample("q3", "what?", CONTEXT, ("crown",), (3,))
  built = features.span_features(wordpiece, [impossible], 24, doc_stride=8, max_query_length=6)
  assert set(built) == {*features.INPUT_FIELDS, "start_positions", "end_positions",
                        "is_impossible", "example_index"}
  assert not built["start_positions"].any() and not built["end_positions"].any()
  assert built["is_impossible"].all()
  with pytest.raises(ValueError, match="example 'q3'.*not in the context at answer_start"):
    features.span_features(wordpiece, [misaligned], 24, max_query_length=6)
  evaluation = features.span_features(wordpiece, [misaligned], 24, max_query_length=6,
                                      is_training=False)
  assert not evaluation["start_positions"].any()
  with pytest.raises(ValueError, match="max_seq_length must be an integer >= 68"):
    features.span_features(wordpiece, [impossible], 40)
  with pytest.raises(ValueError, match="doc_stride must be a positive integer, got 0"):
    features.span_features(wordpiece, [impossible], 128, doc_stride=0)
  with pytest.raises(ValueError, match="is_impossible but has answers"):
    SquadExample("q4", "?", "c", ("c",), (0,), is_impossible=True)


def test_doc_windows_follow_bert():
  assert features.doc_windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
  assert features.doc_windows(10, 4, 8) == [(0, 4), (4, 4), (8, 2)]  # stride <= length
  assert features.doc_windows(3, 4, 2) == [(0, 3)]
  assert features.doc_windows(0, 4, 2) == [(0, 0)]
  # windows (0, 6) and (3, 6): token 4 has min(4, 1) = min(1, 4) context in both (a tie: the
  # first), token 5 min(5, 0) in the first and min(2, 3) in the second
  np.testing.assert_array_equal(features.max_context_window([(0, 6), (3, 6)], 9),
                                [0, 0, 0, 0, 0, 1, 1, 1, 1])
  np.testing.assert_array_equal(features.max_context_window([(0, 4), (2, 6)], 8),
                                [0, 0, 0, 1, 1, 1, 1, 1])  # token 3: 0.04 + 0 < 0.06 + 1


# ----- multiple choice -----

def test_race_choices_keep_the_question_end_and_cut_the_article(sentencepiece):
  assert features.race_choice_text("The king _ at night.", "rode") == "The king rode at night."
  assert features.race_choice_text("Who rode?", "the king") == "Who rode? the king"
  article = "the king rode to the castle at night . " * 4
  choices = [[features.race_choice_text("who rode to the _ ?", o)
              for o in ("castle", "river", "garden", "storm")]]
  built = features.multiple_choice_features(sentencepiece, [article], choices, [2], 20,
                                            max_qa_length=5)
  assert built["input_ids"].shape == (1, 4, 20) and built["label"].tolist() == [2]
  context_ids = sentencepiece.encode([article])[0]
  for c, choice in enumerate(choices[0]):
    qa = sentencepiece.encode([choice])[0][-5:]
    np.testing.assert_array_equal(built["input_ids"][0, c],
                                  [CLS, *context_ids[:20 - 3 - len(qa)], SEP, *qa, SEP])
  with pytest.raises(ValueError, match=r"choices\[1\] must hold 4 texts"):
    features.multiple_choice_features(sentencepiece, ["a", "b"], [["1", "2", "3", "4"],
                                                                  ["1", "2"]], [0, 1], 16)
  with pytest.raises(ValueError, match="num_labels=4, got 4"):
    features.multiple_choice_features(sentencepiece, ["a"], [["1", "2", "3", "4"]], [4], 16)


# ----- TFDS pipelines (offline) -----

def test_task_table():
  assert set(tfds_tasks.GLUE_TASKS) == {"cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli",
                                        "rte", "wnli"}
  assert tfds_tasks.TFDS_TASKS["mnli"].dev_splits == ("validation_matched", "validation_mismatched")
  assert tfds_tasks.TFDS_TASKS["stsb"].kind == "regression"
  assert tfds_tasks.TFDS_TASKS["squad_v2.0"].squad_version == "v2.0"
  assert tfds_tasks.TFDS_TASKS["race"].tfds_names == ("race/middle", "race/high")
  for task in tfds_tasks.TFDS_TASKS.values():
    assert set(task.dev_splits) <= set(task.splits)
    if task.kind != "span":
      assert set(task.metrics) <= set(metrics.METRICS)


def read_source(tfds_name, split):
  for module in tfds_tasks._BUILDER_MODULES:
    __import__(module)
  return tfds.builder(tfds_name).as_data_source(split=split)


@pytest.mark.parametrize("name, split", [("cola", "train"), ("mrpc", "validation"),
                                         ("stsb", "validation"),
                                         ("mnli", "validation_mismatched")])
def test_glue_through_mocked_tfds(wordpiece, name, split):
  task = tfds_tasks.TFDS_TASKS[name]
  with tfds.testing.mock_data(num_examples=7, policy=tfds.testing.MockPolicy.USE_CODE):
    loaded = tfds_tasks.load_task(name, split, wordpiece, 40)
    records = list(read_source(task.tfds_names[0], split))
  arrays = loaded.features
  assert loaded.num_examples == 7 and loaded.examples is None
  assert set(arrays) == {*features.INPUT_FIELDS, "label"}
  assert all(arrays[k].shape == (7, 40) and arrays[k].dtype == np.int32
             for k in features.INPUT_FIELDS)
  labels = [np.asarray(r["label"]).item() for r in records]
  if task.kind == "regression":
    assert arrays["label"].dtype == np.float32
    np.testing.assert_allclose(arrays["label"], labels)
  else:
    assert arrays["label"].dtype == np.int32 and arrays["label"].tolist() == labels
    assert set(labels) <= set(range(task.num_labels))
  texts = [tuple(tfds_tasks._text(r[f]) for f in task.text_fields) for r in records]
  reference = bert.tokenize(wordpiece.tokenizer, [t if len(t) > 1 else t[0] for t in texts],
                            max_length=40)
  width = reference["input_ids"].shape[1]
  for k in features.INPUT_FIELDS:
    np.testing.assert_array_equal(arrays[k][:, :width], reference[k])


def with_answer_spans(version, misplaced=()):
  """``as_data_source`` of SQuAD whose records TFDS's own generator makes random, with a
  word of the context as the answer (v2.0: every third question unanswerable; the questions
  ``misplaced`` with an answer_start one character off), serialised and decoded by the
  builder's features as TFDS stores and reads them."""
  def as_data_source(self, split, decoders=None, deserialize_method=None, **kwargs):
    generated = mocking.RandomFakeGenerator(self.info.features, 40)
    records = []
    for i in range(8):
      record = generated[i]
      context = ". ".join(generated[i * 4 + k]["context"].strip() for k in range(4))
      words = list(re.finditer(r"\S+", context))
      chosen = words[(7 * i + 3) % len(words)]
      answers = {"text": [chosen.group()], "answer_start": [chosen.start() + (i in misplaced)]}
      record.update(context=context, answers=answers)
      if version == "v2.0":
        impossible = i % 3 == 1
        record.update(is_impossible=impossible, plausible_answers=answers)
        if impossible:
          record["answers"] = {"text": [], "answer_start": []}
      features_dict = self.info.features
      records.append(features_dict.deserialize_example_np(
          features_dict.serialize_example(record)))
    return records
  return as_data_source


@pytest.mark.parametrize("version", ["v1.1", "v2.0"])
def test_squad_through_mocked_tfds(wordpiece, version):
  name = f"squad_{version}"
  with tfds.testing.mock_data(policy=tfds.testing.MockPolicy.USE_CODE,
                              as_data_source_fn=with_answer_spans(version)):
    train = tfds_tasks.load_task(name, "train", wordpiece, 24, doc_stride=4,
                                 max_query_length=6)
    dev = tfds_tasks.load_task(name, "validation", wordpiece, 24, doc_stride=4,
                               max_query_length=6)
  assert train.num_skipped == 0 and len(train.examples) == dev.num_examples == 8
  assert "offset_mapping" not in train.features and "offset_mapping" in dev.features
  arrays = dev.features
  windows = len(arrays["input_ids"])
  assert windows > 8 and arrays["offset_mapping"].shape == (windows, 24, 2)
  for name_, array in arrays.items():
    assert array.dtype == np.int32, name_
  for field in ("input_ids", "start_positions", "end_positions", "is_impossible"):
    np.testing.assert_array_equal(train.features[field], arrays[field])
  answered = set()
  for w in range(windows):
    example = dev.examples[arrays["example_index"][w]]
    if arrays["is_impossible"][w]:
      assert arrays["start_positions"][w] == arrays["end_positions"][w] == 0
    else:
      assert answer_text(arrays, w, example) == example.answers[0]
      answered.add(example.id)
  impossible = {e.id for e in dev.examples if e.is_impossible}
  assert answered == {e.id for e in dev.examples} - impossible
  assert len(impossible) == (3 if version == "v2.0" else 0)
  gold = tfds_tasks.evaluation_answers(dev)
  start = np.where(np.arange(24) == arrays["start_positions"][:, None], 3.0, 0.0)
  end = np.where(np.arange(24) == arrays["end_positions"][:, None], 3.0, 0.0)
  # any window may answer here (the choice among windows is the unit tests' business)
  anywhere = dict(arrays, token_is_max_context=arrays["token_is_context"])
  decoded = metrics.decode_spans(start, end, anywhere, [e.context for e in dev.examples])
  texts = metrics.answer_texts(decoded, version)
  scores = metrics.squad_scores(dict(zip(gold, texts)), gold, version)
  assert scores["exact_match"] == scores["f1"] == 1.0


def test_squad_answers_that_miss_the_context_are_left_out_of_training(wordpiece):
  messages = []
  with tfds.testing.mock_data(policy=tfds.testing.MockPolicy.USE_CODE,
                              as_data_source_fn=with_answer_spans("v1.1", misplaced=(1, 4))):
    dev = tfds_tasks.load_task("squad_v1.1", "validation", wordpiece, 32, max_query_length=6)
    train = tfds_tasks.load_task("squad_v1.1", "train", wordpiece, 32, max_query_length=6,
                                 log=messages.append)
  assert dev.num_examples == 8 and train.num_examples == 6 and train.num_skipped == 2
  assert [e.id for e in train.examples] == [e.id for i, e in enumerate(dev.examples)
                                            if i not in (1, 4)]
  misplaced = np.isin(dev.features["example_index"], (1, 4))
  assert not dev.features["start_positions"][misplaced].any()  # scored by text, not position
  assert messages == ["squad_v1.1 train: left out 2 of 8 questions whose answer is not in the "
                      "context at its answer_start"]
  with tfds.testing.mock_data(num_examples=3, policy=tfds.testing.MockPolicy.USE_CODE):
    # TFDS's own random records: answer lists of unequal lengths
    with pytest.raises(ValueError, match="answers and answer_starts must have one entry each"):
      tfds_tasks.load_task("squad_v1.1", "validation", wordpiece, 32)


def race_articles(self, split, decoders=None, deserialize_method=None, **kwargs):
  """``as_data_source`` of RACE: TFDS's random texts in the shape of real articles (3
  questions of 4 options, answers A-D), encoded and decoded by the builder's features."""
  generated = mocking.RandomFakeGenerator(self.info.features, 3)
  records = []
  for i in range(3):
    record = generated[i]
    texts = [str(t) for t in np.ravel(record["options"])]
    record.update(
        questions=[str(q) for q in record["questions"][:2]] + ["the king _ at night"],
        options=[texts[4 * q:4 * q + 4] for q in range(3)],
        answers=["ABCD"[(i + q) % 4] for q in range(3)],
        example_id=f"{self.builder_config.name}-{split}-{i}")
    features_dict = self.info.features
    records.append(features_dict.decode_example_np(features_dict.encode_example(record)))
  return records


def test_race_through_mocked_tfds(sentencepiece):
  with tfds.testing.mock_data(policy=tfds.testing.MockPolicy.USE_CODE,
                              as_data_source_fn=race_articles):
    loaded = tfds_tasks.load_task("race", "dev", sentencepiece, 48, max_qa_length=12)
    middle = tfds_tasks.load_task("race_middle", "dev", sentencepiece, 48, max_examples=2)
    records = list(read_source("race/middle", "dev")) + list(read_source("race/high", "dev"))
  arrays = loaded.features
  assert arrays["input_ids"].shape == (18, 4, 48)  # 2 configs x 3 articles x 3 questions
  assert middle.features["input_ids"].shape == (6, 4, 48)
  assert all(arrays[k].dtype == np.int32 for k in arrays)
  expected = [ord(tfds_tasks._text(a)) - ord("A") for r in records for a in r["answers"]]
  assert arrays["label"].tolist() == expected
  # the row of each choice: [CLS] article [SEP] question + option [SEP]
  questions = [q for r in records for q in tfds_tasks.race_questions(r)]
  article, choices, _ = questions[2]
  assert choices[1] == "the king " + tfds_tasks._texts(records[0]["options"][2])[1] + " at night"
  qa = sentencepiece.encode([choices[1]])[0][-12:]
  context = sentencepiece.encode([article])[0][:48 - 3 - len(qa)]
  row = arrays["input_ids"][2, 1]
  np.testing.assert_array_equal(row[:len(context) + len(qa) + 3],
                                [CLS, *context, SEP, *qa, SEP])


def test_bad_task_requests_are_named_before_any_download(wordpiece):
  with pytest.raises(ValueError, match="unknown task 'squad'"):
    tfds_tasks.load_task("squad", "train", wordpiece, 128)
  with pytest.raises(ValueError, match="split 'validation' is not a split of mnli"):
    tfds_tasks.load_task("mnli", "validation", wordpiece, 128)
  with pytest.raises(ValueError, match="max_examples must be a positive integer, got 0"):
    tfds_tasks.load_task("cola", "train", wordpiece, 128, max_examples=0)


def test_preparing_race_without_tensorflow_names_what_to_install(wordpiece):
  def prepare_without_tensorflow(self, *args, **kwargs):
    # what TFDS raises when it writes RACE's nested options without TensorFlow
    try:
      raise ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")
    except ModuleNotFoundError as err:
      raise ModuleNotFoundError(
          "Error while serializing feature `options`: " + str(err)) from err

  with tfds.testing.mock_data(policy=tfds.testing.MockPolicy.USE_CODE), mock.patch.object(
      tfds.core.DatasetBuilder, "download_and_prepare", prepare_without_tensorflow):
    with pytest.raises(ImportError, match="TFDS needs TensorFlow to prepare race/middle"):
      tfds_tasks.load_task("race", "dev", wordpiece, 64)
