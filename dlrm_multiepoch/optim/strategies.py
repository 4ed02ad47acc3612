"""The remedies of :mod:`dlrm_multiepoch.optim` as comparison strategies: ``NAME -> app flags``.

The sweep's strategy registry imports :data:`REMEDY_STRATEGIES` and registers each
entry; the flags are those of ``apps/train.py``, the help line says what it tests.

Example::

    for name, (flags, help) in REMEDY_STRATEGIES.items():
        register_strategy(name, flags, help)
"""

from typing import Dict, Tuple

REMEDY_STRATEGIES: Dict[str, Tuple[str, str]] = {
    "falr": (
        "--falr log",
        "frequency-adaptive per-row table LR: lr * log(1+count)/log(1+max count) (Pinterest Ads)",
    ),
    "reinit": (
        "--reinit tables@each",
        "re-initialise every table (seeded) and its optimizer state before each epoch after the first (MEDA)",
    ),
    "unknown-row": (
        "--min_count 2",
        "fold ids seen once in train into the unknown row, so the row cold-start ids use is trained",
    ),
    "id-dropout": (
        "--id_dropout 0.05",
        "look up 5% of training ids as the unknown row (seeded), so it trains on a sample of all rows",
    ),
    "table-lr-cosine": (
        "--table_lr_warmup 5% --table_lr_decay cosine",
        "table LR warm-up over 5% of the run, then cosine decay to 0 (a sparse-optimizer schedule)",
    ),
    "delayed+falr": (
        "--freeze_schedule delayed --falr log",
        "tables frozen until the last epoch, then trained with the frequency-adaptive LR",
    ),
    "delayed+unknown-row": (
        "--freeze_schedule delayed --min_count 2",
        "tables frozen until the last epoch; ids seen once fold into the trained unknown row",
    ),
    "falr+unknown-row": (
        "--falr log --min_count 2",
        "frequency-adaptive table LR with a trained unknown row",
    ),
}
