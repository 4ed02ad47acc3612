"""Shared last step of every loader: raw columns + split rows -> :class:`InteractionData`."""

from typing import Dict, List, Optional, Sequence

import numpy as np
import pandas as pd

from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, UNKNOWN_ID, InteractionData, Split, TableSpec
from dlrm_multiepoch.data.encode import IdMap
from dlrm_multiepoch.data.history import build_history

USER_FEATURE = "user"
ITEM_FEATURE = "item"


def assemble(
    name: str,
    frame: pd.DataFrame,
    splits: Dict[str, np.ndarray],
    sparse: Sequence[str],
    dense: np.ndarray,
    dense_names: List[str],
    labels: Dict[str, np.ndarray],
    min_count: int = 1,
    history_length: int = 0,
    times: Optional[np.ndarray] = None,
    seed: int = 0,
    notes: Optional[List[str]] = None,
) -> InteractionData:
    """Encode ``frame``'s categorical columns with train-only :class:`IdMap` s, add item
    histories, and cut every array into splits.

    Args:
        name: dataset name.
        frame: one row per interaction; each column in ``sparse`` holds raw values
            (NaN = missing). The column name is the feature name; table ``t_<feature>``.
        splits: split name -> row indices into ``frame``; must contain ``"train"``.
        sparse: feature columns, in KJT order.
        dense: ``float32 [N, D]`` already-normalised dense features.
        dense_names: their ``D`` names.
        labels: task -> ``[N]`` 0/1 labels.
        min_count: ids seen fewer times in train fold into the unknown row.
        history_length: ``K > 0`` adds the ``"history"`` feature to the item table;
            needs ``"user"`` and ``"item"`` among ``sparse``.
        times: ``[N]`` timestamps for the history (``None``: seeded order).
        seed: seed of the history order when there are no timestamps.
        notes: if given, receives human-readable per-split lines (users, items,
            share of rows whose user/item falls in the unknown row).

    Example::

        data = assemble("movielens", frame, {"train": tr, "test": te}, ["user", "item"],
                        dense, ["age"], {"like": like}, history_length=20, times=ts)
    """
    if "train" not in splits:
        raise ValueError(f"{name}: splits {sorted(splits)} lack 'train'")
    if min_count < 1:
        raise ValueError(f"--min_count must be >= 1, got {min_count}")
    if history_length < 0:
        raise ValueError(f"--history_length must be >= 0, got {history_length}")
    train = splits["train"]
    n = len(frame)
    ids: Dict[str, np.ndarray] = {}
    tables: List[TableSpec] = []
    for feature in sparse:
        id_map = IdMap.fit(frame[feature].iloc[train], min_count)
        ids[feature] = id_map.transform(frame[feature])
        features = [feature]
        if feature == ITEM_FEATURE and history_length > 0:
            features.append(HISTORY_FEATURE)
        tables.append(TableSpec(f"t_{feature}", id_map.num_embeddings, features))

    history = None
    if history_length > 0:
        missing = {USER_FEATURE, ITEM_FEATURE} - set(sparse)
        if missing:
            raise ValueError(
                f"{name}: --history_length needs {sorted(missing)} features; this dataset has {list(sparse)}"
            )
        user_key = pd.factorize(frame[USER_FEATURE])[0]
        item_key = pd.factorize(frame[ITEM_FEATURE])[0]
        history = build_history(user_key, item_key, ids[ITEM_FEATURE], train, history_length, times=times, seed=seed)

    for task, y in labels.items():
        if len(y) != n:
            raise ValueError(f"{name}: label {task!r} has {len(y)} rows, expected {n}")
    if dense.shape != (n, len(dense_names)):
        raise ValueError(f"{name}: dense array {dense.shape} does not match {n} rows x {dense_names}")

    data = InteractionData(name=name, tables=tables, dense_names=list(dense_names), tasks=list(labels))
    for split_name, rows in splits.items():
        data.splits[split_name] = Split(
            sparse={f: ids[f][rows] for f in sparse},
            dense=np.ascontiguousarray(dense[rows], dtype=np.float32),
            labels={t: np.asarray(y[rows], dtype=np.float32) for t, y in labels.items()},
            history=None if history is None else history[rows],
        )
        if notes is not None:
            notes.append(_split_note(name, split_name, frame.iloc[rows], data.splits[split_name]))
    return data


def _split_note(name: str, split_name: str, raw: pd.DataFrame, split: Split) -> str:
    parts = [f"{name} {split_name}: {len(raw)} rows"]
    for feature in (USER_FEATURE, ITEM_FEATURE):
        if feature in split.sparse and len(raw):
            unknown = float(np.mean(split.sparse[feature] == UNKNOWN_ID))
            parts.append(f"{raw[feature].nunique()} {feature}s ({unknown:.1%} of rows in the unknown row)")
    return ", ".join(parts)
