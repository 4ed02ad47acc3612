"""Tiny generated inputs shaped like the real files (Book-Crossing and MovieLens wheels,
a Criteo TSV) and checks shared by the data tests."""

import zipfile
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import pandas as pd

from dlrm_multiepoch.data import InteractionData, Ragged
from dlrm_multiepoch.data.bookcrossing import BOOKS_FILE, RATINGS_FILE, USERS_FILE
from dlrm_multiepoch.data.movielens import INTER_FILE, ITEM_FILE, USER_FILE


def make_bookcrossing_wheel(path: Path, seed: int = 0) -> pd.DataFrame:
    """A wheel-shaped zip with BX-*.csv files (``;``-separated, quoted, latin-1, CRLF
    ratings) and one malformed book line. Returns the ratings it wrote."""
    rng = np.random.default_rng(seed)
    isbns = [f"{i:010d}" for i in range(30)] + ["123", "0123", "034545104X"]  # leading zeros matter
    users = list(range(1, 26))
    ratings = pd.DataFrame(
        {
            "User-ID": rng.choice(users, 500),
            "ISBN": rng.choice(isbns, 500),
            "Book-Rating": rng.choice([0, 0, 0, 1, 5, 7, 8, 9, 10], 500),
        }
    ).drop_duplicates(["User-ID", "ISBN"], ignore_index=True)
    lines = ['"User-ID";"ISBN";"Book-Rating"'] + [f'"{u}";"{i}";"{r}"' for u, i, r in ratings.itertuples(index=False)]
    ratings_csv = "\r\n".join(lines) + "\r\n"
    books = [
        '"ISBN";"Book-Title";"Book-Author";"Year-Of-Publication";"Publisher";"Image-URL-S";"Image-URL-M";"Image-URL-L"'
    ]
    for n, isbn in enumerate(isbns[:-1]):  # the last ISBN has no book entry
        year = ["1999", "0", "2030", "1985"][n % 4]
        books.append(f'"{isbn}";"Title {n}";"Autor {n % 7} Müller";"{year}";"Pub {n % 3}";"s";"m";"l"')
    books.insert(5, '"9999999999";"Broken; title";"A";"2000";"P";"s";"m";"l";"extra"')  # 9 fields
    users_csv = ['"User-ID";"Location";"Age"']
    places = ["nyc, new york, usa", "porto, v.n.gaia, portugal", "kiel, , germany", "somewhere, n/a", "x, y, "]
    for u in users:
        age = ["NULL", '"18"', '"0"', '"33"', '"244"', '"61"'][u % 6]
        users_csv.append(f'"{u}";"{places[u % 5]}";{age}')
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(RATINGS_FILE, ratings_csv.encode("latin-1"))
        zf.writestr(BOOKS_FILE, ("\n".join(books) + "\n").encode("latin-1"))
        zf.writestr(USERS_FILE, ("\n".join(users_csv) + "\n").encode("latin-1"))
    return ratings


def make_movielens_wheel(path: Path, seed: int = 0) -> pd.DataFrame:
    """A wheel-shaped zip with RecBole ``ml-100k.{inter,user,item}`` atomic files."""
    rng = np.random.default_rng(seed)
    inter = pd.DataFrame(
        {
            "user_id": rng.integers(1, 21, 400).astype(str),
            "item_id": rng.integers(1, 41, 400).astype(str),
            "rating": rng.integers(1, 6, 400),
            "timestamp": rng.integers(880000000, 880000300, 400),  # many ties
        }
    ).drop_duplicates(["user_id", "item_id"], ignore_index=True)
    inter_txt = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n" + "".join(
        f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in inter.itertuples(index=False)
    )
    user_txt = "user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n" + "".join(
        f"{u}\t{15 + 3 * u}\t{'MF'[u % 2]}\t{['writer', 'other', 'student'][u % 3]}"
        f"\t{['85711', 'T8H1N', '94043'][u % 3]}\n"
        for u in range(1, 21)
    )
    item_txt = "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n" + "".join(
        f"{i}\tMovie \"{i}\"\t{'' if i == 3 else 1950 + i}\t{['Drama', 'Comedy Drama', 'Action Thriller'][i % 3]}\n"
        for i in range(1, 41)
    )
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(INTER_FILE, inter_txt)
        zf.writestr(USER_FILE, user_txt)
        zf.writestr(ITEM_FILE, item_txt)
    return inter


def make_criteo_tsv(
    path: Path, rows: int = 300, seed: int = 0, malformed: bool = False
) -> Tuple[np.ndarray, List[str]]:
    """Criteo-format TSV; returns the per-row/per-category emptiness mask and the lines."""
    rng = np.random.default_rng(seed)
    lines, empty = [], np.zeros((rows, 26), dtype=bool)
    for r in range(rows):
        dense = [("" if rng.random() < 0.2 else str(int(rng.integers(-1, 5000)))) for _ in range(13)]
        cats = []
        for j in range(26):
            if rng.random() < 0.15:
                empty[r, j] = True
                cats.append("")
            else:
                cats.append(f"{int(rng.integers(0, 2**32)):08x}")
        lines.append("\t".join([str(int(rng.integers(0, 2)))] + dense + cats))
    if malformed:
        lines.insert(3, "1\t2\t3")  # too few fields
        lines.insert(7, "\t".join(["1"] + ["1"] * 13 + ["zzzz"] + ["ab"] * 25))  # not hex
        lines.insert(11, "\t".join(["2"] + ["1"] * 13 + ["ab"] * 26))  # label not 0/1
    path.write_text("\n".join(lines) + "\n")
    return empty, lines


def logger() -> Tuple[List[str], Callable[[str], None]]:
    lines: List[str] = []
    return lines, lines.append


def assert_frequency_encoded(data: InteractionData, feature: str, raw_train_missing: int = 0) -> None:
    """Train ids are dense 1..max, counts non-increasing with id, row 0 = missing only."""
    ids = data.splits["train"].sparse[feature]
    counts = np.bincount(ids, minlength=data.table_of(feature).num_embeddings)
    assert len(counts) == data.table_of(feature).num_embeddings
    assert counts[0] == raw_train_missing
    assert (counts[1:] > 0).all() and (np.diff(counts[1:]) <= 0).all()


def all_arrays(data: InteractionData) -> Dict[str, np.ndarray]:
    """Every stored array of every split, by name (bags as values + offsets)."""
    out = {}
    for name, split in data.splits.items():
        for k, v in split.sparse.items():
            if isinstance(v, Ragged):
                out[f"{name}/{k}/values"], out[f"{name}/{k}/offsets"] = v.values, v.offsets
            else:
                out[f"{name}/{k}"] = v
        out.update({f"{name}/label/{k}": v for k, v in split.labels.items()})
        out[f"{name}/dense"] = split.dense
        if split.history is not None:
            out[f"{name}/history"] = split.history
    return out
