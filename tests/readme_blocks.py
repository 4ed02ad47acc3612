"""README's drop-in code blocks and the example they are excerpts of (``examples/deepfm/train_deepfm.py``), and
docs/YOUR_MODEL.md's commands over the example's model (:data:`YOUR_MODEL_RUN`).

README.md marks each block with an HTML comment (:data:`LOOP`, :data:`PARTS`); the
example marks the same code with ``# [README: <name>]`` ... ``# [README: end]`` inside a
function. :func:`readme_block` returns README's text, :func:`example_block` the example's
dedented; the tests run the README's and require the two equal.

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
YOUR_MODEL = ROOT / "docs" / "YOUR_MODEL.md"
EXAMPLE_DIR = ROOT / "examples" / "deepfm"
EXAMPLE = EXAMPLE_DIR / "train_deepfm.py"
LOOP, PARTS = "drop-in loop", "drop-in parts"
YOUR_MODEL_RUN = "your model"  # docs/YOUR_MODEL.md's bash block, run from a folder holding the example's files


def readme_block(name: str, page: Path = README) -> str:
    """The code block of ``page`` (README.md by default) marked ``<!-- NAME: ... -->``, verbatim."""
    match = re.search(r"<!-- " + re.escape(name) + r":[^>]*-->\s*```\w+\n(.*?)```", page.read_text(), re.S)
    assert match, f"{page.name} has no code block marked <!-- {name}: ... -->"
    return match.group(1)


def example_block(name: str) -> str:
    """The example's code between ``# [README: NAME]`` and ``# [README: end]``, dedented."""
    match = re.search(r"\n( *)# \[README: " + re.escape(name) + r"\]\n(.*?)\n\1# \[README: end\]", EXAMPLE.read_text(), re.S)
    assert match, f"{EXAMPLE} has no block marked # [README: {name}]"
    return textwrap.dedent(match.group(2)) + "\n"


def import_example():
    """The example's modules (``deepfm``, ``train_deepfm``), imported as the script imports them."""
    if str(EXAMPLE_DIR) not in sys.path:
        sys.path.insert(0, str(EXAMPLE_DIR))
    import deepfm  # noqa: E402
    import train_deepfm  # noqa: E402

    return deepfm, train_deepfm
