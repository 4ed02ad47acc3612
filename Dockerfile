# A container image for clusters: the TorchRec stack and the dlrm-multiepoch wheel, nothing of the
# source tree. Jobs run `torchrun -m dlrm_multiepoch.train` from the image's working directory
# (/workspace; mount your runs and data there), e.g.
#   torchx run -s kubernetes --workspace "" dlrm_multiepoch.train --image REGISTRY/dlrm-multiepoch:cpu ...
#
#   docker build -t dlrm-multiepoch:cpu .                                            # TorchRec 1.8 on CPU (CPU torch)
#   docker build --build-arg DEVICE=cuda --build-arg TORCHREC=1.9 -t dlrm-multiepoch:cu .
#   buildah bud --isolation chroot --build-arg BASE_IMAGE=... -t dlrm-multiepoch:cpu .   # no Docker engine
#
# The stacks, pins and install order are the Makefile's (`make stack` prints them; tests/test_install.py
# checks this file against it): torch by its exact pin first (a bare or ranged torch pulls a multi-GB CUDA
# build), then torchrec's dependencies and the wheel with those pins repeated, and torchrec last with
# --no-deps (it requires an unpinned fbgemm-gpu, which would replace fbgemm-gpu-cpu by the CUDA build).
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS wheel
COPY . /src
RUN python3 -m venv /tmp/build && /tmp/build/bin/pip wheel --quiet --disable-pip-version-check --no-deps -w /dist /src

FROM ${BASE_IMAGE}
# TORCHREC=1.8|1.9 and DEVICE=cpu|cuda, as the Makefile's; TORCH_INDEX_URL an extra index for torch. With
# DEVICE=cpu and no TORCH_INDEX_URL, torch comes from the PyTorch CPU index (PyPI's torch is the CUDA build,
# several GB of NVIDIA libraries that a CPU image must not hold); the build fails if a CUDA torch got in.
ARG TORCHREC=1.8
ARG DEVICE=cpu
ARG TORCH_INDEX_URL=
ARG CPU_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Further pip options for every install step, e.g. a mirror: --index-url URL, or --find-links DIR.
ARG PIP_OPTIONS=
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
COPY --from=wheel /dist /dist
RUN set -eu; \
    case "$TORCHREC" in \
      1.8) TORCH_VERSION=2.13.0; FBGEMM_VERSION=1.8.0; TORCHREC_VERSION=1.8.0 ;; \
      1.9) TORCH_VERSION=2.14.1; FBGEMM_VERSION=1.9.0; TORCHREC_VERSION=1.9.2 ;; \
      *) echo "TORCHREC must be 1.8 or 1.9, not '$TORCHREC'" >&2; exit 1 ;; \
    esac; \
    case "$DEVICE" in \
      cpu) FBGEMM="fbgemm-gpu-cpu==$FBGEMM_VERSION" ;; \
      cuda) FBGEMM="fbgemm-gpu==$FBGEMM_VERSION" ;; \
      *) echo "DEVICE must be cpu or cuda, not '$DEVICE'" >&2; exit 1 ;; \
    esac; \
    TORCH="torch==$TORCH_VERSION"; \
    if [ -z "$TORCH_INDEX_URL" ] && [ "$DEVICE" = cpu ]; then TORCH_INDEX_URL=$CPU_TORCH_INDEX_URL; fi; \
    INDEX=""; if [ -n "$TORCH_INDEX_URL" ]; then INDEX="--extra-index-url $TORCH_INDEX_URL"; fi; \
    PIP="python -m pip install --no-cache-dir --disable-pip-version-check $PIP_OPTIONS"; \
    python3 -m venv /opt/venv; \
    $PIP $INDEX "$TORCH" "$FBGEMM"; \
    $PIP "$TORCH" "$FBGEMM" tensordict==0.15.3 torchmetrics==1.0.3 pyre-extensions==0.0.32 \
        iopath==0.1.10 "$(ls /dist/dlrm_multiepoch-*.whl)[kubernetes]"; \
    $PIP --no-deps "torchrec==$TORCHREC_VERSION"; \
    rm -rf /dist; \
    python -c 'import sys, torch, fbgemm_gpu, torchrec, torchx, dlrm_multiepoch; \
print(f"installed torch {torch.__version__}, torchrec {torchrec.__version__}, dlrm-multiepoch {dlrm_multiepoch.__version__}"); \
sys.exit(f"DEVICE=cpu but torch {torch.__version__} is a CUDA build: give TORCH_INDEX_URL a CPU index") \
if sys.argv[1] == "cpu" and torch.version.cuda else None' "$DEVICE"
WORKDIR /workspace
CMD ["python", "-m", "dlrm_multiepoch.train", "--help"]
