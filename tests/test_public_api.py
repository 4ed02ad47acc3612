"""The package's top level exports exactly the components its docstring lists, and each one imports."""

import importlib
import re

import dlrm_multiepoch


def _documented() -> list:
    """The names the package docstring lists, between its first paragraph and "Everything else"."""
    doc = dlrm_multiepoch.__doc__
    listing = doc[doc.index("and nothing else") : doc.index("Everything else")]
    return re.findall(r"``(\w+)``", listing)


def test_top_level_exports_exactly_the_documented_components():
    documented = _documented()
    assert len(documented) == len(set(documented)), "a name is listed twice"
    assert sorted(documented) == dlrm_multiepoch.__all__
    # The test helper and the CLI factory stay importable where they live.
    for helper in ("count_all_to_all", "make_train_pipeline", "PRESETS"):
        assert helper not in dir(dlrm_multiepoch)
    from dlrm_multiepoch.lookup.comm_count import count_all_to_all  # noqa: F401
    from dlrm_multiepoch.pipeline.factory import make_train_pipeline  # noqa: F401


def test_each_export_imports_and_is_the_defining_modules_object():
    for name in dlrm_multiepoch.__all__:
        value = getattr(importlib.import_module("dlrm_multiepoch"), name)
        defined_in = importlib.import_module(value.__module__)
        assert value.__module__.startswith("dlrm_multiepoch."), (name, value.__module__)
        assert getattr(defined_in, value.__name__) is value, name
        assert value.__name__ == name, f"{name} is exported under another name than its own ({value.__name__})"
        exec(f"from dlrm_multiepoch import {name}", {})
