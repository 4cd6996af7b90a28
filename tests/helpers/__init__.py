"""What several test files share: the tiny configs each kind of run is tested at, the runs and
files made from them, and the environment of the processes tests start. Imported as
``from helpers import ...`` (pytest puts ``tests/`` on the path, as Python does for a script
there; a process that imports it from elsewhere has ``subprocess_env(TESTS)``)."""
from helpers.configs import config_from_file, shipped_config
from helpers.processes import FIXTURES, REPO, TESTS, subprocess_env

__all__ = ["FIXTURES", "REPO", "TESTS", "config_from_file", "shipped_config", "subprocess_env"]
