"""The example's data as a file the training app reads (``--dataset interactions``): ``clicks.csv``.

``deepfm.py``'s synthetic rows (labels follow a planted user x item affinity), one interaction a
line: ``user_id,item_id,category,d0,d1,d2,d3,label``. The app encodes the ids (row 0 of every
table: the unknown id), splits the rows (``--test_fraction``, ``--val_fraction``) and adds each
user's latest items as the ``history`` feature (``--history_length``)::

    python make_clicks.py clicks.csv --rows 6000
"""

import argparse
import csv
from typing import Optional, Sequence

from deepfm import NUM_DENSE, synthetic_rows

DENSE = [f"d{i}" for i in range(NUM_DENSE)]


def write_clicks(path: str, rows: int, seed: int = 1) -> None:
    """``rows`` interactions of ``synthetic_rows(rows, seed)`` as CSV at ``path``."""
    data = synthetic_rows(rows, seed)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["user_id", "item_id", "category", *DENSE, "label"])
        for i in range(rows):
            ids = [int(data.ids[name][i]) for name in ("user", "item", "category")]
            out.writerow([*ids, *(f"{float(v):.5f}" for v in data.dense[i]), int(data.labels[i])])


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", help="the CSV to write")
    parser.add_argument("--rows", type=int, default=6000)
    args = parser.parse_args(argv)
    write_clicks(args.path, args.rows)
    print(f"wrote {args.rows} interactions to {args.path}")


if __name__ == "__main__":
    main()
