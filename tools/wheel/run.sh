#!/usr/bin/env bash
# make test-wheel: the package as a user gets it, for each TorchRec release given (1.8, 1.9).
#
#   tools/wheel/run.sh PYTHON RELEASE...     (PYTHON: an interpreter with pip, to build the wheel)
#
# 1. builds the wheel (pip wheel --no-deps) from this checkout;
# 2. per release: a fresh venv, docs/INSTALL.md's CPU block for that release run as written (the
#    wheel's path in place of the package name), then pytest, the test runner, beside it;
# 3. makes the venv's site-packages read-only: chmod -R a-w, and as root (whom file modes do not
#    stop) a read-only bind mount in a private mount namespace;
# 4. from a folder outside the checkout that holds only copies of tests/, what they import beside the
#    package (examples/: the DeepFM the drop-in test trains and docs/YOUR_MODEL.md's commands run; the rank
#    spawner is the wheel's dlrm_multiepoch.testing) and the pages whose blocks the tests read,
#    runs tests/wheel/ (the README's quick tour, the TorchX components, your model under sweep and search) and
#    the two drop-in blocks (README.md's and docs/DROPIN.md's, tests/test_dropin.py);
# 5. for a release in $INTERNALS_RELEASES (the Makefile's WHEEL_INTERNALS): from the checkout, on this venv's
#    stack, the TorchRec-internals tests ($INTERNALS_TESTS, `make test-1.9`'s list, test_dropin.py whole
#    among them, so step 4 leaves the drop-in blocks to it): CI's run of them on that release, without a
#    second venv of the same stack;
# 6. checks that nothing under site-packages changed (a listing of paths, sizes and times).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PY=$1
shift
BASE_PY=$("$PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlrm-multiepoch-wheel.XXXXXX")
cleanup() { chmod -R u+w "$WORK" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

t0=$SECONDS
# From a copy of what the wheel is built from (the Dockerfile's .dockerignore list): setuptools
# writes build/ and *.egg-info beside the sources, never into the checkout.
mkdir -p "$WORK/src"
cp -r "$REPO/pyproject.toml" "$REPO/README.md" "$REPO/dlrm_multiepoch" "$WORK/src/"
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$WORK/dist" "$WORK/src"
WHEEL=$(ls "$WORK"/dist/dlrm_multiepoch-*.whl)
echo "test-wheel: built $(basename "$WHEEL") in $((SECONDS - t0)) s"

for release in "$@"; do
    t0=$SECONDS
    venv=$WORK/venv-$release
    "$BASE_PY" -m venv "$venv"
    (cd "$REPO" && "$PY" -m tests.install_docs "$release" cpu "$WHEEL") > "$WORK/install-$release.sh"
    echo "test-wheel: TorchRec $release: docs/INSTALL.md's lines, as run:"
    sed 's/^/    /' "$WORK/install-$release.sh"
    # `pip` is the venv's, as in an activated environment.
    PATH="$venv/bin:$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1 bash -euo pipefail "$WORK/install-$release.sh" > "$WORK/install-$release.log" 2>&1 \
        || { tail -n 30 "$WORK/install-$release.log"; exit 1; }
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check pytest >> "$WORK/install-$release.log" 2>&1 \
        || { tail -n 30 "$WORK/install-$release.log"; exit 1; }
    echo cpu > "$venv/.device"  # what the venv was made for (INSTALL.md's CPU block), as the Makefile records it
    echo "test-wheel: TorchRec $release: venv installed in $((SECONDS - t0)) s"
    internals=false
    for r in ${INTERNALS_RELEASES:-}; do [ "$r" = "$release" ] && internals=true; done

    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    chmod -R a-w "$site"
    listing() { find "$site" -printf '%P %s %T@\n' | LC_ALL=C sort; }
    listing > "$WORK/site-before-$release.txt"

    user=$WORK/user-$release  # the user's own folder: no checkout, no package sources
    mkdir -p "$user"
    cp -r "$REPO/tests" "$user/tests"
    cp -r "$REPO/examples" "$user/examples"
    cp "$REPO/README.md" "$user/README.md"
    mkdir -p "$user/docs" && cp "$REPO/docs/YOUR_MODEL.md" "$REPO/docs/DROPIN.md" "$user/docs/"
    find "$user" -name __pycache__ -prune -exec rm -rf {} +
    pytest=(env PATH="$venv/bin:$PATH" DLRM_WHEEL_SITE="$site" "$venv/bin/python" -m pytest -q -p no:cacheprovider
            --durations=12 -W ignore::pytest.PytestUnknownMarkWarning)
    if [ "$(id -u)" = 0 ]; then  # root: site-packages read-only by a bind mount as well
        pytest=(unshare -m --propagation private bash -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"' _ "$site" "${pytest[@]}")
    fi
    tour=(tests/wheel)
    $internals || tour+=(tests/test_dropin.py -k "wheel or readme or components_on_torchrec_models")
    t0=$SECONDS
    (cd "$user" && "${pytest[@]}" "${tour[@]}")
    echo "test-wheel: TorchRec $release: the tour from $user took $((SECONDS - t0)) s"
    if $internals; then
        t0=$SECONDS
        # From the checkout: its tests and code (first on sys.path) on this venv's stack, as `make test-1.9` runs them.
        (cd "$REPO" && "${pytest[@]}" ${INTERNALS_TESTS:?the TorchRec-internals tests, from the Makefile})
        echo "test-wheel: TorchRec $release: the TorchRec-internals tests took $((SECONDS - t0)) s"
    fi

    listing > "$WORK/site-after-$release.txt"
    if ! diff -u "$WORK/site-before-$release.txt" "$WORK/site-after-$release.txt"; then
        echo "test-wheel: TorchRec $release: something wrote inside the installation (above)" >&2
        exit 1
    fi
    chmod -R u+w "$venv" && rm -rf "$venv"  # the 1.9 venv holds several GB
done
