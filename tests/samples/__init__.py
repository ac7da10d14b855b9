"""The samples' tests: a package, so that its conftest.py is not the ``conftest`` module that
tests elsewhere import (see conftest.py)."""
