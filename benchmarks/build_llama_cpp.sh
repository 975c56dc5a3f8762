#!/usr/bin/env bash
# Build llama.cpp (llama-server, llama-bench, llama-cli) from the source that the llama-cpp-python source package on
# the package index ships (vendor/llama.cpp), with cmake and ninja from the index: nothing else is downloaded.
#   bash benchmarks/build_llama_cpp.sh [DEST]     (default: $XDG_CACHE_HOME/specsim/llama.cpp, or ~/.cache/...)
# Minutes on a 2-core machine. specsim finds the binaries in DEST/bin, or through $SPECSIM_LLAMA_CPP.
set -euo pipefail
DEST=${1:-${SPECSIM_LLAMA_CPP:-${XDG_CACHE_HOME:-$HOME/.cache}/specsim/llama.cpp}}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
work=$(mktemp -d /tmp/llama-cpp-build-XXXX)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q cmake ninja
"$work/venv/bin/pip" download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work"
tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
export PATH="$work/venv/bin:$PATH"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF >"$work/cmake.log"
cmake --build "$work/build" -j "$(nproc)" --target llama-server llama-bench llama-cli
mkdir -p "$DEST/bin"
cp "$work"/build/bin/llama-server "$work"/build/bin/llama-bench "$work"/build/bin/llama-cli "$DEST/bin/"
echo "llama-cpp-python $VERSION (vendor/llama.cpp)" > "$DEST/VERSION"
echo "llama.cpp built into $DEST/bin"
