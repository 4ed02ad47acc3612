"""Shared last step of every loader: raw columns + split rows -> :class:`InteractionData`."""

from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import pandas as pd

from dlrm_multiepoch.data.config import parse_min_count
from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, UNKNOWN_ID, InteractionData, Split, TableSpec
from dlrm_multiepoch.data.encode import IdMap
from dlrm_multiepoch.data.history import build_history
from dlrm_multiepoch.table_values import TableValues

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
    min_count: Union[int, str, TableValues[int]] = 1,
    history_length: int = 0,
    times: Optional[np.ndarray] = None,
    seed: int = 0,
    notes: Optional[List[str]] = None,
    id_fit_splits: Sequence[str] = ("train",),
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
        min_count: ids seen fewer times in the id-fitting rows fold into the unknown row:
            one value for every table, or ``"2,t_user=5"`` / :class:`TableValues` per table.
        history_length: ``K > 0`` adds the ``"history"`` feature to the item table;
            needs ``"user"`` and ``"item"`` among ``sparse``.
        times: ``[N]`` timestamps for the history (``None``: seeded order).
        seed: seed of the history order when there are no timestamps.
        notes: if given, receives human-readable per-split lines (users, items,
            share of rows whose user/item falls in the unknown row) and per-table fold lines.
        id_fit_splits: splits whose rows the id maps are fitted on (``("train",
            "pretrain")`` gives rows seen only in pre-training data their own row).

    Every split gets slices ``unseen_user``/``unseen_item`` (the raw id is missing or
    absent from the train split) and ``seen_user_item`` (neither), for per-slice metrics.

    Example::

        data = assemble("movielens", frame, {"train": tr, "test": te}, ["user", "item"],
                        dense, ["age"], {"like": like}, history_length=20, times=ts)
    """
    if "train" not in splits:
        raise ValueError(f"{name}: splits {sorted(splits)} lack 'train'")
    if not isinstance(min_count, TableValues):
        min_count = parse_min_count(min_count)
    min_count.check_tables([f"t_{f}" for f in sparse])
    missing_fit = [s for s in id_fit_splits if s not in splits]
    if missing_fit:
        raise ValueError(f"--id_maps: {name} has no {missing_fit} split (it has {sorted(splits)})")
    if history_length < 0:
        raise ValueError(f"--history_length must be >= 0, got {history_length}")
    train = splits["train"]
    fit = np.sort(np.concatenate([splits[s] for s in id_fit_splits]))
    n = len(frame)
    ids: Dict[str, np.ndarray] = {}
    tables: List[TableSpec] = []
    encoding: Dict[str, Dict[str, float]] = {}
    for feature in sparse:
        table = f"t_{feature}"
        count = int(min_count.get(table))
        id_map = IdMap.fit(frame[feature].iloc[fit], count)
        ids[feature] = id_map.transform(frame[feature])
        features = [feature]
        if feature == ITEM_FEATURE and history_length > 0:
            features.append(HISTORY_FEATURE)
        tables.append(TableSpec(table, id_map.num_embeddings, features))
        encoding[table] = _fold_report(frame[feature], fit, count, ids[feature], splits)
        if notes is not None:
            notes.append(_fold_note(table, encoding[table]))

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

    unseen = _unseen_slices(frame, train, sparse)
    data = InteractionData(
        name=name, tables=tables, dense_names=list(dense_names), tasks=list(labels), encoding=encoding
    )
    for split_name, rows in splits.items():
        data.splits[split_name] = Split(
            sparse={f: ids[f][rows] for f in sparse},
            dense=np.ascontiguousarray(dense[rows], dtype=np.float32),
            labels={t: np.asarray(y[rows], dtype=np.float32) for t, y in labels.items()},
            history=None if history is None else history[rows],
            slices={k: v[rows] for k, v in unseen.items()},
        )
        if notes is not None:
            notes.append(_split_note(name, split_name, frame.iloc[rows], data.splits[split_name]))
    return data


def _fold_report(
    raw: pd.Series, fit: np.ndarray, min_count: int, ids: np.ndarray, splits: Dict[str, np.ndarray]
) -> Dict[str, float]:
    """What encoding did to one table: ids kept and folded, and each split's rows in row 0."""
    counts = raw.iloc[fit].value_counts(dropna=True)
    folded = counts[counts < min_count]
    report: Dict[str, float] = {
        "min_count": min_count,
        "fit_ids": int(len(counts)),
        "folded_ids": int(len(folded)),
        "folded_fit_rows": int(folded.sum()),
    }
    for split_name, rows in splits.items():
        report[f"{split_name}_unknown_row_share"] = float(np.mean(ids[rows] == UNKNOWN_ID)) if len(rows) else 0.0
    return report


def _fold_note(table: str, r: Dict[str, float]) -> str:
    shares = ", ".join(f"{k[: -len('_unknown_row_share')]} {v:.1%}" for k, v in r.items() if k.endswith("_unknown_row_share"))
    return (
        f"table {table}: min_count {r['min_count']} folds {r['folded_ids']:,} of {r['fit_ids']:,} ids "
        f"({r['folded_ids'] / max(r['fit_ids'], 1):.1%}; {r['folded_fit_rows']:,} rows) into the unknown row; "
        f"rows in the unknown row: {shares}"
    )


def _unseen_slices(frame: pd.DataFrame, train: np.ndarray, sparse: Sequence[str]) -> Dict[str, np.ndarray]:
    """``unseen_user``/``unseen_item``: the raw id is missing or absent from the train split."""
    slices: Dict[str, np.ndarray] = {}
    for feature in (USER_FEATURE, ITEM_FEATURE):
        if feature in sparse:
            col = frame[feature]
            slices[f"unseen_{feature}"] = (~col.isin(pd.Index(col.iloc[train].dropna().unique())) | col.isna()).to_numpy()
    if len(slices) == 2:
        slices["seen_user_item"] = ~(slices["unseen_user"] | slices["unseen_item"])
    return slices


def _split_note(name: str, split_name: str, raw: pd.DataFrame, split: Split) -> str:
    parts = [f"{name} {split_name}: {len(raw)} rows"]
    for feature in (USER_FEATURE, ITEM_FEATURE):
        if feature in split.sparse and len(raw):
            unknown = float(np.mean(split.sparse[feature] == UNKNOWN_ID))
            parts.append(f"{raw[feature].nunique()} {feature}s ({unknown:.1%} of rows in the unknown row)")
    return ", ".join(parts)
