"""The docs' promises that a test can keep: a short README, a docstring on every public name of
the API reference, tutorials that are notebooks the docs build executes, and a wheel that installs
into a clean environment and runs (slow: it installs jax from the package index)."""
import glob
import importlib
import importlib.metadata
import inspect
import os
import re
import subprocess
import sys
import textwrap

import pytest

import normattn_jax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
sys.path.insert(0, os.path.join(DOCS, "_ext"))
import tutorial_checks  # noqa: E402  (docs/_ext: the docs build's own checks)
from api_names import public_names  # noqa: E402


def read(*parts: str) -> str:
  with open(os.path.join(ROOT, *parts)) as f:
    return f.read()


def api_modules() -> list:
  """The modules the API reference documents: the entries of the autosummary lists of its
  public part (docs/api.md) and of its internals (docs/internals.md)."""
  return [name for page in ("api.md", "internals.md")
          for name in re.findall(r"^   (normattn_jax[\w.]*)$", read("docs", page), flags=re.M)]


def undocumented(module) -> list:
  """The module's public names, and their classes' public methods and properties, that have no
  docstring (a dataclass field holding a function is a field, not a method)."""
  missing = [] if (module.__doc__ or "").strip() else [module.__name__]
  for name in public_names(module):
    value = getattr(module, name)
    if not (inspect.isfunction(value) or inspect.isclass(value)):
      continue
    if not (inspect.getdoc(value) or "").strip():
      missing.append(f"{module.__name__}.{name}")
    if inspect.isclass(value):
      fields = set(getattr(value, "__dataclass_fields__", ()))
      for attribute, member in vars(value).items():
        if attribute.startswith("_") or attribute in fields:
          continue
        member = getattr(member, "__func__", member)
        if ((inspect.isfunction(member) or isinstance(member, property))
            and not (member.__doc__ or "").strip()):
          missing.append(f"{module.__name__}.{name}.{attribute}")
  return missing


def test_the_api_reference_covers_the_named_parts():
  modules = api_modules()
  for name in ("normattn_jax", "normattn_jax.attention", "normattn_jax.nnx",
               "normattn_jax.models.sequence", "normattn_jax.registry", "normattn_jax.tasks",
               "normattn_jax.sweep.train", "normattn_jax.pretrain.train",
               "normattn_jax.finetune.train", "normattn_jax.card.train"):
    assert name in modules, f"docs/api.md does not document {name}"


@pytest.mark.parametrize("module", api_modules())
def test_every_public_name_has_a_docstring(module):
  missing = undocumented(importlib.import_module(module))
  assert not missing, "no docstring: " + ", ".join(missing)


def test_the_docstring_check_finds_a_missing_one():
  module = type(sys)("probe")
  exec(textwrap.dedent('''
      """A module."""
      def documented():
        """Yes."""
      def bare():
        pass
      class Thing:
        """A class."""
        def method(self):
          pass
      '''), module.__dict__)
  for value in vars(module).values():
    if inspect.isfunction(value) or inspect.isclass(value):
      value.__module__ = "probe"
  assert undocumented(module) == ["probe.bare", "probe.Thing.method"]


def test_the_readme_is_a_page():
  lines = read("README.md").splitlines()
  assert len(lines) <= 200, f"README.md has {len(lines)} lines"


def test_every_link_of_the_readme_reaches_a_file():
  links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", read("README.md"))
  files = [link for link in links if not re.match(r"https?://", link)]
  assert files
  missing = [link for link in files if not os.path.exists(os.path.join(ROOT, link))]
  assert not missing, missing


def test_the_tutorials_are_notebooks_the_docs_execute():
  tutorials = sorted(glob.glob(os.path.join(DOCS, "tutorials", "*.md")))
  assert len(tutorials) >= 4
  index = read("docs", "index.md")
  for path in tutorials:
    with open(path) as f:
      text = f.read()
    name = os.path.splitext(os.path.basename(path))[0]
    assert text.startswith("---\njupytext:") and "kernelspec:" in text, name
    assert "```{code-cell} python" in text, name
    assert f"tutorials/{name}" in index, f"{name} is not in the docs' table of contents"
  conf = read("docs", "conf.py")
  assert ('nb_execution_mode = os.environ.get("NB_EXECUTION_MODE", "cache")' in conf
          and "nb_execution_raise_on_error = True" in conf)
  assert "NB_EXECUTION_MODE=force" in read("Makefile")  # make test-all runs every tutorial




def code_cell(source: str, *outputs) -> dict:
  return {"cell_type": "code", "source": source, "outputs": list(outputs)}


def test_the_tutorial_check_finds_warning_blocks_stray_reprs_and_long_lines():
  stream = lambda text: {"output_type": "stream", "name": "stderr", "text": text}
  result = lambda text: {"output_type": "execute_result", "data": {"text/plain": text}}
  notebook = {"cells": [
      {"cell_type": "markdown", "source": "x" * 100},
      code_cell("x = 1", stream("WARNING:absl:Item 'default' was found in the checkpoint\n")),
      code_cell("y = 2", stream("ok\n/a/b.py:3: UserWarning: careful\n  warnings.warn(x)\n")),
      code_cell("fig.suptitle('t')", result("Text(0.5, 0.98, 't')")),
      code_cell("z = 3  # " + "-" * 80, stream("W1128 17:50:18.123 1 f.py:2] slow\n")),
      code_cell("print('fine')", stream("no warning here: a WARNING-free line\n"),
                result("array([1, 2])"))]}
  found = tutorial_checks.problems(notebook)
  assert [line.split(":")[0] for line in found] == ["code cell 1", "code cell 2", "code cell 3",
                                                    "code cell 4", "code cell 4"], found
  assert "Item 'default'" in found[0] and "UserWarning: careful" in found[1]
  assert "Text(0.5" in found[2] and "a line of 89 columns" in found[3]


def tutorial_cells(path: str) -> list:
  """The code cells of a MyST tutorial, as they are written."""
  with open(path) as f:
    return re.findall(r"^```\{code-cell\} python\n(.*?)^```$", f.read(), flags=re.S | re.M)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(DOCS, "tutorials", "*.md"))),
                         ids=os.path.basename)
def test_a_tutorials_code_fits_and_needs_only_the_extras_it_names(path):
  notebook = {"cells": [code_cell(source) for source in tutorial_cells(path)]}
  assert notebook["cells"] and not tutorial_checks.problems(notebook)
  assert not any(re.search(r"^\s*(import|from) (hypothesis|pytest)\b", cell, flags=re.M)
                 for cell in tutorial_cells(path)), "a tutorial imports a test-only package"


EXECUTED = sorted(glob.glob(os.path.join(DOCS, "_build", "jupyter_execute", "tutorials",
                                         "*.ipynb")))


@pytest.mark.skipif(not EXECUTED, reason="no docs build here: make docs executes the tutorials")
@pytest.mark.parametrize("path", EXECUTED, ids=os.path.basename)
def test_an_executed_tutorial_holds_no_warning_block(path):
  """The tutorials as the last docs build executed them (make test-all builds the docs first,
  every tutorial run afresh)."""
  import json
  with open(path) as f:
    assert not tutorial_checks.problems(json.load(f))


def test_the_version_is_the_installed_one():
  assert normattn_jax.__version__ == importlib.metadata.version("normattn_jax")
  assert f"## {normattn_jax.__version__}" in read("CHANGELOG.md")
  assert f"\nversion: {normattn_jax.__version__}\n" in read("CITATION.cff")
  assert f"version = {{{normattn_jax.__version__}}}" in read("README.md")  # its BibTeX


CORE_EXAMPLE = """
import jax, jax.numpy as jnp
import normattn_jax as na
x = jnp.ones((2, 10, 16))
layer = na.MultiHeadAttention(num_heads=2, normalization="dnas")
y = layer.apply(layer.init(jax.random.key(0), x), x, padding_mask=jnp.arange(10) < 7)
assert y.shape == (2, 10, 16) and bool(jnp.isfinite(y).all())
try:
  import normattn_jax.train
except ImportError as err:
  assert "pip install 'normattn_jax[experiments]'" in str(err), err
else:
  raise AssertionError("the core install imported normattn_jax.train")
print("core ok", na.__version__)
"""

EXPERIMENTS_EXAMPLE = """
import tempfile
from normattn_jax.configs import demo
from normattn_jax.sweep.train import load_model, run_sweep
c = demo.get_config()
c.archs, c.learning_rates, c.num_seeds = ("nap",), (0.01,), 2
c.task.seq_len, c.model.d_model = 8, 8
c.train.num_steps, c.train.eval_every = 20, 10
workdir = tempfile.mkdtemp()
summary = run_sweep(c, workdir, show_progress=False)
module, variables = load_model(workdir, arch="nap", learning_rate=0.01, seed=1)
print("experiments ok", sorted(summary["best"]))
"""


def run(command: list, **kwargs) -> str:
  done = subprocess.run(command, capture_output=True, text=True, **kwargs)
  assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-3000:])
  return done.stdout


@pytest.mark.slow
def test_the_wheel_installs_into_a_clean_environment_and_runs(tmp_path):
  """``python -m build`` makes an sdist and a wheel that ``twine check`` passes; the wheel,
  installed into a new virtual environment (core only, then with ``[experiments]``, at the pinned
  versions), runs an example of each, away from the source tree, and its console script
  ``normattn-sweep`` runs the shipped ``demo`` config beside a user's own ``configs`` package."""
  dist = tmp_path / "dist"
  run([sys.executable, "-m", "build", "--outdir", str(dist), ROOT], timeout=900)
  wheels = glob.glob(str(dist / "*.whl"))
  sdists = glob.glob(str(dist / "*.tar.gz"))
  assert len(wheels) == 1 and len(sdists) == 1
  assert normattn_jax.__version__ in os.path.basename(wheels[0])
  run([sys.executable, "-m", "twine", "check", "--strict", *wheels, *sdists])
  venv = tmp_path / "venv"
  run([sys.executable, "-m", "venv", str(venv)])
  python = str(venv / "bin" / "python")
  constraints = os.path.join(ROOT, "constraints.txt")
  environment = dict(os.environ, JAX_PLATFORMS="cpu")
  environment.pop("PYTHONPATH", None)
  for extra, example, expected in ((None, CORE_EXAMPLE, "core ok"),
                                   ("experiments", EXPERIMENTS_EXAMPLE, "experiments ok")):
    requirement = wheels[0] + (f"[{extra}]" if extra else "")
    run([python, "-m", "pip", "install", "--quiet", "-c", constraints, requirement],
        timeout=1800)
    out = run([python, "-c", example], cwd=str(tmp_path), env=environment, timeout=900)
    assert expected in out
  # beside a user's own package named configs (as flax's examples and big_vision have), whose
  # import is theirs, the wheel's console script runs a shipped config by its name
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "__init__.py").write_text("")
  (tmp_path / "configs" / "demo.py").write_text("OWNER = 'the user'\n")
  out = run([python, "-c", "from configs import demo; print(demo.OWNER)"], cwd=str(tmp_path),
            env=environment)
  assert out.strip() == "the user"
  workdir = tmp_path / "run"
  run([str(venv / "bin" / "normattn-sweep"), "--config", "demo", "--workdir", str(workdir),
       "--config.archs=('nap',)", "--config.learning_rates=(0.01,)", "--config.num_seeds=1",
       "--config.task.seq_len=8", "--config.model.d_model=8", "--config.train.num_steps=20",
       "--config.train.eval_every=10", "--config.eval.val_batches=1",
       "--config.eval.case_set_size=4"], cwd=str(tmp_path), env=environment, timeout=900)
  assert (workdir / "summary.json").exists() and (workdir / "accuracy.png").exists()
