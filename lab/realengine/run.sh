#!/usr/bin/env bash
# realengine/run.sh: llmroute's real-engine cache measurement, in one command.
#
#   lab/realengine/run.sh [realbench flags...]     e.g. -repeat 1 -groups 4
#
# Runs in lab/. Installs node-llama-cpp into realengine/node_modules if missing, writes the
# tiny GGUF model, builds Caddy with llmroute, then runs two llama.cpp
# replicas behind it under each routing strategy and writes
# experiments/results/realengine.json and experiments/results/realengine/*.png.
# Takes 15-20 minutes on 2 busy cores (a third with -repeat 1). Everything
# stays on 127.0.0.1, and every process it starts is stopped when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=realengine/out
mkdir -p "$OUT"

command -v node >/dev/null || { echo "node (20+) is required" >&2; exit 1; }
command -v go >/dev/null || { echo "Go 1.26+ is required" >&2; exit 1; }

if [ ! -d realengine/node_modules/node-llama-cpp ]; then
  echo ">> npm install (node-llama-cpp 3.22.1 with prebuilt llama.cpp binaries)"
  (cd realengine && { [ -f package-lock.json ] && npm ci --no-audit --no-fund || npm install --no-audit --no-fund; })
fi

echo ">> generating the model"
go build -o "$OUT/gguftiny" ./realengine/cmd/gguftiny
"$OUT/gguftiny" -o "$OUT/tiny.gguf"

echo ">> building caddy with llmroute"
go build -C .. -o "$PWD/$OUT/caddy" ./cmd/caddy
go build -o "$OUT/realbench" ./realengine/cmd/realbench

echo ">> measuring"
"$OUT/realbench" -model "$OUT/tiny.gguf" -caddy "$OUT/caddy" -out "$OUT" "$@"
