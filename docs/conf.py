"""Sphinx configuration of the docs site: MyST markdown pages, MyST notebooks executed at build
time (myst-nb), the API reference from the docstrings (autodoc + autosummary)."""
import ast
import importlib
import inspect
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import normattn_jax  # noqa: E402

project = "normattn_jax"
release = version = normattn_jax.__version__
author = "the normattn_jax authors"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon",
              "sphinx.ext.mathjax", "sphinx.ext.viewcode"]
templates_path = ["_templates"]
exclude_patterns = ["_build", "README.md", "jupyter_execute", "**.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# Every tutorial runs when the site builds; one that fails stops the build with its cell.
nb_execution_mode = "force"
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

autosummary_generate = True
autosummary_imported_members = False

# The packages that re-export their submodules' names through ``__all__``. Their pages
# (_templates/autosummary/module.rst) list those names with links to the one indexed description,
# in the defining module: documenting a name twice makes two targets for every cross-reference
# to it ("more than one target found for cross-reference 'AttentionSpec'"). A package added to
# docs/api.md that re-exports names belongs here too.
REEXPORTING = ("normattn_jax", "normattn_jax.attention", "normattn_jax.tasks", "normattn_jax.train")


def _defining_module(modname, name):
  """The module that defines ``name``: follows the ``from X import name`` statements at the top
  level of ``modname``'s source (a package's re-export, then its submodule's) to the module
  that does not import it."""
  tree = ast.parse(inspect.getsource(importlib.import_module(modname)))
  for node in tree.body:
    if (isinstance(node, ast.ImportFrom) and node.level == 0
        and any(alias.name == name and alias.asname in (None, name) for alias in node.names)):
      return _defining_module(node.module, name)
  return modname


autosummary_context = {"reexports": {
    package: [f"{_defining_module(package, name)}.{name}"
              for name in importlib.import_module(package).__all__]
    for package in REEXPORTING}}

autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "sphinx_book_theme"
html_title = "normattn_jax"
html_theme_options = {"show_toc_level": 2, "navigation_with_keys": False}


def _skip_function_fields(app, what, name, obj, skip, options):
  """Leave out a class attribute that holds a function defined elsewhere: a dataclass field
  whose default is a function (``Task.check``, ``HeadParam.constrain``, a flax module's
  ``kernel_init``). autodoc would document the default as a method of the class, beside the
  attribute that the class docstring's ``Attributes:`` section describes."""
  if what == "class" and inspect.isfunction(obj) and not obj.__qualname__.endswith("." + name):
    return True
  return None


def setup(app):
  """Connects ``_skip_function_fields``."""
  app.connect("autodoc-skip-member", _skip_function_fields)
