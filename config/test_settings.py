"""The test suite's settings, chosen explicitly: pyproject.toml names this module
(pytest-django), and config/settings.py reads that choice as TESTING. Everything
else is config/settings.py's."""

from config.settings import *  # noqa: F403
