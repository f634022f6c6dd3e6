"""Where the data files shipped with msdiag live: rules/ and reports/templates/.

In a checkout (or an editable install) they are the top-level folders of the repository; a wheel
carries them inside the package as ``msdiag._rules`` and ``msdiag._templates``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PACKAGED = {"rules": "msdiag._rules", "templates": "msdiag._templates"}
_CHECKOUT = {"rules": Path("rules"), "templates": Path("reports") / "templates"}


def resource_dir(kind: str) -> Path:
    """The folder of ``kind`` ("rules" or "templates")."""
    spec = importlib.util.find_spec(_PACKAGED[kind])
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            if Path(loc).is_dir():
                return Path(loc)
    checkout = Path(__file__).resolve().parents[1] / _CHECKOUT[kind]
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"msdiag's {kind} folder is missing from this installation")
