"""The wheel ships every package of msdiag: a package folder missing from pyproject.toml's explicit list
installs without it, and `pip install msdiag` then fails on import (CI's second environment installs the wheel)."""

from __future__ import annotations

import sys

from conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def test_every_package_folder_is_in_the_wheel() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "msdiag").rglob("__init__.py")}
    assert folders, "no package found under msdiag/"
    assert folders <= listed, f"pyproject.toml's [tool.setuptools] packages lacks {sorted(folders - listed)}"
