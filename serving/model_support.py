"""What every served python model does before its own work: load its sibling files, check the bundle,
read its parameters.

Standard library only: this file is copied next to each python model of a bundle (as
``model_support.py``, beside ``bundle_integrity.py`` and the pure pipeline modules), where neither
``serving`` nor ``pipeline`` is installed.  One copy of this scaffolding instead of one per model file.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path


def sibling(folder: Path, name: str):
    """Import ``folder/<name>.py`` (a file copied next to the model) under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"ernie_bundle_{name}", Path(folder) / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    # Registered before running it: dataclasses (bio.Entity, windows.Window, spans.Span) look their
    # module up in sys.modules while the class is being made.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def params(args: dict) -> dict[str, str]:
    """The ``parameters`` of a python model's config, as Triton hands them to ``initialize``."""
    return {k: v.get("string_value", "") for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}


def start(folder: Path, args: dict) -> dict[str, str]:
    """``initialize``'s first step for every model: refuse a bundle whose files were changed since packaging
    (``bundle_integrity.py``; the bundle root is two levels up), then return the model's parameters."""
    folder = Path(folder)
    sibling(folder, "bundle_integrity").verify_bundle(folder.parent.parent)
    return params(args)
