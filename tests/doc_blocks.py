"""The docs' drop-in code blocks and the example they are excerpts of (``examples/deepfm/train_deepfm.py``), and
docs/YOUR_MODEL.md's commands over the example's model (:data:`YOUR_MODEL_RUN`).

A page marks each block with an HTML comment (``<!-- NAME: ... -->``): README.md the loop
(:data:`LOOP`), docs/DROPIN.md the parts (:data:`PARTS`); the example marks the same code with
``# [PAGE: NAME]`` ... ``# [end of block]`` inside a function. :func:`doc_block` returns the page's
text, :func:`example_block` the example's dedented; the tests run the page's and require the two equal.

Names a block reads from its caller (what a script running it must define):

- the loop (:data:`LOOP`): ``model``, ``dense_optimizer``, ``schedule``, ``loader``
  (``len``, ``iter``, ``set_epoch``), ``epochs``, ``device``, ``checkpoint_dir``,
  ``resume_from`` (None: a fresh start);
- the parts (:data:`PARTS`): ``model``, ``optimizer``, ``tasks``, ``loader``, ``val_loader``,
  ``epochs``, ``device``, ``rank``, ``id_dropout`` (feature -> rate), ``checkpoint_dir``,
  ``resume_from``.
"""

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DROPIN = ROOT / "docs" / "DROPIN.md"
YOUR_MODEL = ROOT / "docs" / "YOUR_MODEL.md"
EXAMPLE_DIR = ROOT / "examples" / "deepfm"
EXAMPLE = EXAMPLE_DIR / "train_deepfm.py"
LOOP, PARTS = "drop-in loop", "drop-in parts"
YOUR_MODEL_RUN = "your model"  # docs/YOUR_MODEL.md's bash block, run from a folder holding the example's files
PAGES = {LOOP: README, PARTS: DROPIN, YOUR_MODEL_RUN: YOUR_MODEL}  # where each block is shown


def doc_block(name: str) -> str:
    """The code block marked ``<!-- NAME: ... -->`` on the page that shows it (:data:`PAGES`), verbatim."""
    page = PAGES[name]
    match = re.search(r"<!-- " + re.escape(name) + r":[^>]*-->\s*```\w+\n(.*?)```", page.read_text(), re.S)
    assert match, f"{page.relative_to(ROOT)} has no code block marked <!-- {name}: ... -->"
    return match.group(1)


def example_block(name: str) -> str:
    """The example's code between ``# [PAGE: NAME]`` and ``# [end of block]``, dedented."""
    marker = re.escape(f"{PAGES[name].relative_to(ROOT)}: {name}")
    match = re.search(r"\n( *)# \[" + marker + r"\]\n(.*?)\n\1# \[end of block\]", EXAMPLE.read_text(), re.S)
    assert match, f"{EXAMPLE} has no block marked # [{PAGES[name].relative_to(ROOT)}: {name}]"
    return textwrap.dedent(match.group(2)) + "\n"


def import_example():
    """The example's modules (``deepfm``, ``train_deepfm``), imported as the script imports them."""
    if str(EXAMPLE_DIR) not in sys.path:
        sys.path.insert(0, str(EXAMPLE_DIR))
    import deepfm  # noqa: E402
    import train_deepfm  # noqa: E402

    return deepfm, train_deepfm
