"""The pre-training app as a file, for ``torchrun apps/pretrain.py`` in a checkout: the same as
``python -m dlrm_multiepoch.pretrain`` (``dlrm_multiepoch/train/app.py``'s ``pretrain_main``), which
works from any directory once the package is installed."""

from dlrm_multiepoch.train.app import pretrain_main as main

if __name__ == "__main__":
    main()
