"""A source's input files: ``--data_path`` as the files a source's ``locate`` reads, checked.

Example::

    register_source(Source("mydata", prepare=prepare_mydata, locate=lambda cfg, cache, log:
                           require_file(cfg, "a CSV file of my events")))
"""

import os
from pathlib import Path
from typing import List

from dlrm_multiepoch.config_section import split_list
from dlrm_multiepoch.data.source import DataFlags


def input_paths(data_path: str) -> List[str]:
    """``--data_path`` as a list of paths: one path, or several separated by commas
    (a path that exists as written is one path, commas and all)."""
    return [data_path] if os.path.exists(data_path) or "," not in data_path else split_list(data_path)


def require_file(cfg: DataFlags, what: str) -> Path:
    """``--data_path`` as one file that exists; errors say what the source expects."""
    paths = require_files(cfg, what)
    if len(paths) > 1:
        raise ValueError(f"--data_path names {len(paths)} files; --dataset {cfg.dataset} reads one ({what})")
    return paths[0]


def require_files(cfg: DataFlags, what: str) -> List[Path]:
    """``--data_path`` as files that exist: one path, or several separated by commas
    (:func:`input_paths`); errors say what the source expects."""
    if not cfg.data_path:
        raise ValueError(f"--data_path is required for --dataset {cfg.dataset} ({what})")
    paths = [Path(p) for p in input_paths(cfg.data_path)]
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"--data_path {path} does not exist (--dataset {cfg.dataset} reads {what})")
        if path.is_dir():
            raise ValueError(
                f"--data_path {path} is a folder without a preprocessed dataset; --dataset {cfg.dataset} reads {what}"
            )
    repeated = sorted({str(p) for p in paths if paths.count(p) > 1})
    if repeated:
        raise ValueError(f"--data_path names {repeated} more than once")
    return paths
