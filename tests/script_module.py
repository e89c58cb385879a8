"""Load a file of ``scripts/`` as a module: the scripts are run by path, not imported."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(path: Path) -> ModuleType:
    """Execute ``path`` (absolute, or a file name under ``scripts/``) and return it as a module."""
    path = path if path.is_absolute() else SCRIPTS / path
    if str(path.parent) not in sys.path:  # as when run by path: a script imports its neighbours
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass resolves its string annotations through sys.modules
    spec.loader.exec_module(module)
    return module
