"""The training app as a file, for ``torchrun apps/train.py`` in a checkout: the same as
``python -m dlrm_multiepoch.train`` (``dlrm_multiepoch/train/app.py``'s ``train_main``), which
works from any directory once the package is installed."""

from dlrm_multiepoch.train.app import train_main as main

if __name__ == "__main__":
    main()
