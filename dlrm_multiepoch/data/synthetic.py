"""Seeded synthetic interactions with Zipf-distributed ids, for tests and benchmarks."""

from typing import Dict, Sequence

import numpy as np

from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, HISTORY_PAD, InteractionData, Split, TableSpec


def synthetic_data(
    num_rows: int = 4096,
    table_sizes: Dict[str, int] = None,
    num_dense: int = 4,
    tasks: Sequence[str] = ("like", "love"),
    history_length: int = 0,
    zipf_a: float = 1.2,
    test_fraction: float = 0.25,
    val_fraction: float = 0.0,
    seed: int = 0,
) -> InteractionData:
    """An ``InteractionData`` whose labels depend on the ids (so models can learn).

    Args:
        num_rows: rows over train and test.
        table_sizes: table name -> rows; each table serves one feature of the same name.
            The table named ``item`` also serves ``history`` when ``history_length > 0``.
        num_dense: dense columns.
        tasks: label names; each later task is a sparser subset of the previous one.
        history_length: K of the ``history`` feature (0 = none).
        zipf_a: Zipf exponent of the ids (hot rows repeat across batches).
        test_fraction: fraction of rows in the test split.
        val_fraction: fraction of the train rows held out as the ``val`` split (0: none).
        seed: RNG seed; equal seeds give identical data.

    Example::

        data = synthetic_data(2048, {"user": 500, "item": 1000, "age": 8})
    """
    table_sizes = table_sizes or {"user": 1000, "item": 2000, "age": 8}
    rng = np.random.default_rng(seed)
    sparse = {
        name: (np.minimum(rng.zipf(zipf_a, num_rows), size - 1)).astype(np.int64)
        for name, size in table_sizes.items()
    }
    dense = rng.standard_normal((num_rows, num_dense)).astype(np.float32)
    # A fixed random score per id makes labels a learnable function of the features.
    score = sum(rng.standard_normal(size)[sparse[name]] for name, size in table_sizes.items()) + dense.sum(1)
    labels: Dict[str, np.ndarray] = {}
    for i, task in enumerate(tasks):
        labels[task] = (score + rng.standard_normal(num_rows) > 0.5 + i).astype(np.float32)
    history = None
    if history_length:
        if "item" not in table_sizes:
            raise ValueError("history_length > 0 needs a table named 'item'")
        history = np.minimum(rng.zipf(zipf_a, (num_rows, history_length)), table_sizes["item"] - 1)
        lengths = rng.integers(0, history_length + 1, num_rows)
        history[np.arange(history_length)[None, :] >= lengths[:, None]] = HISTORY_PAD
    full = Split(sparse=sparse, dense=dense, labels=labels, history=history)
    n_test = int(num_rows * test_fraction)
    n_val = int((num_rows - n_test) * val_fraction)
    tables = [
        TableSpec(name, size, [name, HISTORY_FEATURE] if name == "item" and history_length else [name])
        for name, size in table_sizes.items()
    ]
    data = InteractionData(
        name=f"synthetic{seed}",
        tables=tables,
        dense_names=[f"dense{i}" for i in range(num_dense)],
        tasks=list(tasks),
        splits={"train": full.take(np.arange(n_test + n_val, num_rows)), "test": full.take(np.arange(n_test))},
    )
    if n_val:
        data.splits["val"] = full.take(np.arange(n_test, n_test + n_val))
    data.validate()
    return data
