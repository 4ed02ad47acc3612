#!/usr/bin/env bash
# make test-image: build the Dockerfile's CPU image with buildah (no Docker engine runs here, no
# registry is reachable) and run the package inside it: `python -m dlrm_multiepoch.train --help`
# and a tiny 1-rank training on a MovieLens-shaped zip made by tests/data_inputs.py, inside the image
# too: nothing here needs the repository's .venv.
#
#   tools/image/run.sh
#
# The build uses the Dockerfile's defaults but the base image: `docker build .`'s CPU image, its torch
# from the PyTorch CPU index (where that index is out of reach, as here, pip says so and takes the
# machine's own 2.13.0+cpu wheel; the Dockerfile refuses a CUDA torch in a CPU image).
#
# The base image comes from Debian's packages: debootstrap (bookworm, minbase, python3 and venv)
# imported with buildah, kept in buildah's storage as localhost/dlrm-multiepoch-base:bookworm for
# the next call. The build runs as root with --storage-driver vfs and --isolation chroot (no
# overlay mounts, no user namespaces needed). This machine's pip settings reach the build by
# read-only mounts: its CA bundle, pip config and the local wheel folders they name.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BASE=localhost/dlrm-multiepoch-base:bookworm
IMAGE=localhost/dlrm-multiepoch:cpu-test
B=(buildah --storage-driver vfs)
if ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; then
    echo "test-image: installing Debian's buildah and debootstrap"
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah debootstrap >/dev/null
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlrm-multiepoch-image.XXXXXX")
containers=()
cleanup() {
    for c in "${containers[@]}"; do "${B[@]}" rm "$c" >/dev/null 2>&1 || true; done
    "${B[@]}" rmi "$IMAGE" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

t0=$SECONDS
if ! "${B[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$WORK/rootfs" \
        http://deb.debian.org/debian > "$WORK/debootstrap.log" 2>&1 || { tail -n 20 "$WORK/debootstrap.log"; exit 1; }
    printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' > "$WORK/rootfs/etc/hosts"  # minbase has none
    c=$("${B[@]}" from scratch); containers+=("$c")
    cp -a "$WORK/rootfs/." "$("${B[@]}" mount "$c")/"
    "${B[@]}" umount "$c" >/dev/null
    "${B[@]}" commit --quiet "$c" "$BASE" >/dev/null
    rm -rf "$WORK/rootfs"
    echo "test-image: base image $BASE from debootstrap in $((SECONDS - t0)) s"
fi

t0=$SECONDS
mounts=()
for path in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf /etc/xdg/pip /opt/wheels /opt/pypi /opt/pypi-more; do
    [ -e "$path" ] && mounts+=(-v "$path:$path:ro")
done
find_links=$(python3 -m pip config get global.find-links 2>/dev/null || true)
find_links=${PIP_FIND_LINKS:-$find_links}
"${B[@]}" bud --isolation chroot --layers=false "${mounts[@]}" --build-arg "BASE_IMAGE=$BASE" \
    ${find_links:+--build-arg "PIP_OPTIONS=--find-links $find_links"} -t "$IMAGE" -f "$REPO/Dockerfile" "$REPO" \
    > "$WORK/build.log" 2>&1 || { tail -n 30 "$WORK/build.log"; exit 1; }
grep -h '^installed torch ' "$WORK/build.log" | sed 's/^/test-image: /' || true
echo "test-image: built $IMAGE in $((SECONDS - t0)) s ($("${B[@]}" images --format '{{.Size}}' "$IMAGE"))"

t0=$SECONDS
mkdir -p "$WORK/data" "$WORK/workspace"
c=$("${B[@]}" from --quiet "$IMAGE"); containers+=("$c")
# The tiny data, written by the image's own Python from the repository's tests/ (read-only).
"${B[@]}" run --isolation chroot -v "$REPO/tests:/src/tests:ro" -v "$WORK/data:/data" "$c" -- python -c \
    'import sys; sys.path.insert(0, "/src"); from pathlib import Path; from tests.data_inputs import make_movielens_wheel; make_movielens_wheel(Path(sys.argv[1]))' \
    /data/ml.zip
# chroot isolation shares the host's network but not its host name: the host's /etc/hosts (what a
# container runtime injects), torchrun --standalone (a free port, not 29500, which a host job may
# hold) and --local-addr 127.0.0.1 (the workers meet there, not at the container's unresolvable name).
run=("${B[@]}" run --isolation chroot -v /etc/hosts:/etc/hosts:ro -v "$WORK/data:/data:ro" -v "$WORK/workspace:/workspace" "$c" --)
usage=$("${run[@]}" python -m dlrm_multiepoch.train --help)  # whole: a closed pipe makes buildah complain
echo "test-image: ${usage%%$'\n'*}"
timeout 300 "${run[@]}" torchrun --standalone --local-addr 127.0.0.1 --nproc_per_node 1 -m dlrm_multiepoch.train --dataset movielens --data_path /data/ml.zip \
    --cache_dir /workspace/cache --epochs 1 --batch_size 64 --run_name image --no-progress_bar > "$WORK/train.log" 2>&1 \
    || { tail -n 30 "$WORK/train.log"; exit 1; }
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["evaluations"], s; print("test-image: 1-rank training in the image:", {k: v for k, v in s["evaluations"][-1].items() if k in ("epoch", "step")})' \
    "$WORK/workspace/runs/image/summary.json"
echo "test-image: ran in the image in $((SECONDS - t0)) s"
