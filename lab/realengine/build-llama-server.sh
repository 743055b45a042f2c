#!/usr/bin/env bash
# build-llama-server.sh: build llama.cpp's real llama-server from the source
# the node-llama-cpp npm package carries (its llama/gitRelease.bundle), and
# cache the binary, so that the real-engine bench runs the server people run.
#
#   lab/realengine/build-llama-server.sh          # prints the binary's path
#
# The binary is cached under $LLAMA_SERVER_CACHE (default
# ~/.cache/llmroute/llama-server-<node-llama-cpp version>); a second run
# prints the cached path at once. A clean build takes about 20 minutes on
# two busy cores. Needs npm, git, cmake and g++ (installed with apt-get when
# missing and run as root).
set -euo pipefail
VERSION="${NODE_LLAMA_CPP_VERSION:-3.21.1}"
CACHE="${LLAMA_SERVER_CACHE:-$HOME/.cache/llmroute/llama-server-$VERSION}"
BIN="$CACHE/llama-server"
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
need() { command -v "$1" >/dev/null 2>&1; }
if ! need cmake || ! need g++ || ! need git; then
  if [ "$(id -u)" = 0 ] && need apt-get; then
    echo ">> installing cmake, g++, git" >&2
    apt-get update -qq >&2 && apt-get install -y -qq cmake g++ git >/dev/null
  else
    echo "cmake, g++ and git are required" >&2
    exit 1
  fi
fi
need npm || { echo "npm is required" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo ">> npm pack node-llama-cpp@$VERSION" >&2
(cd "$work" && npm pack --silent "node-llama-cpp@$VERSION" >/dev/null && tar xzf node-llama-cpp-*.tgz)
echo ">> cloning llama.cpp from its git bundle" >&2
git clone -q "$work/package/llama/gitRelease.bundle" "$work/llama.cpp"
commit="$(git -C "$work/llama.cpp" rev-parse HEAD)"
echo ">> configuring llama.cpp $commit" >&2
cmake -S "$work/llama.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >&2
echo ">> building llama-server (about 20 minutes on 2 cores)" >&2
nice -n "${BUILD_NICE:-10}" cmake --build "$work/build" --target llama-server -j "${JOBS:-2}" >&2
mkdir -p "$CACHE"
cp "$work/build/bin/llama-server" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
echo "$commit" >"$CACHE/llama.cpp.commit"
echo "node-llama-cpp@$VERSION" >"$CACHE/source"
echo "$BIN"
