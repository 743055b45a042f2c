#!/usr/bin/env bash
# record-llamacpp-fixtures.sh: record what llama.cpp's real server answers
# into caddymodule/testdata/engines/llamacpp/, the fixtures the module's
# tests read (caddymodule/llamacpp_fixture_test.go).
#
#   lab/realengine/record-llamacpp-fixtures.sh <model.gguf>
#
# Builds (or finds) llama-server with build-llama-server.sh, starts it on a
# loopback port with --metrics, --api-key and two slots, and records:
# /metrics without the key (401) and with it (after the requests), /v1/models
# without the key and with it, a chat answer cold and warm
# (cached_tokens 0, then above 0), the same streamed with usage, a
# completions answer, /v1/messages JSON and SSE, /v1/responses, /v1/models,
# /props and /slots, as the server wrote them; SOURCE names the server's
# build and commit.
set -euo pipefail
cd "$(dirname "$0")/../.."
model="${1:?usage: $0 <model.gguf>}"
bin="$(lab/realengine/build-llama-server.sh)"
out=caddymodule/testdata/engines/llamacpp
mkdir -p "$out"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
key=sk-fixture
"$bin" -m "$model" --host 127.0.0.1 --port "$port" --metrics --api-key "$key" -np 2 -c 4096 -t 1 \
  --jinja --cache-reuse 256 >/tmp/llama-fixtures.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
base="http://127.0.0.1:$port"
for _ in $(seq 1 120); do
  curl -sf "$base/health" >/dev/null 2>&1 && break
  sleep 0.5
done
curl -sf "$base/health" >/dev/null || { echo "llama-server did not start; see /tmp/llama-fixtures.log" >&2; exit 1; }
build="$(curl -s -H "Authorization: Bearer $key" "$base/props" | python3 -c 'import json,sys; p=json.load(sys.stdin); print(p.get("build_info",""))')"
commit="$(cat "$(dirname "$bin")/llama.cpp.commit" 2>/dev/null || echo unknown)"
header="llama.cpp server $build (commit $commit), recorded by lab/realengine/record-llamacpp-fixtures.sh"
auth=(-H "Authorization: Bearer $key")
json=(-H "Content-Type: application/json")
record() { # record <file> <curl args...>: the answer's body as the server wrote it
  local f="$out/$1"; shift
  curl -s -o "$f" "$@"
  echo ">> $f" >&2
}
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
echo "$header" >"$out/SOURCE"
{ echo "status $(status "$base/metrics")"; curl -s "$base/metrics"; echo; } >"$out/metrics_nokey.txt"
sys="You are a meticulous assistant. $(printf 'Answer in short, exact sentences about the house style. %.0s' $(seq 1 40))"
chat() { printf '{"model":"tiny","max_tokens":4,"temperature":0,%s"messages":[{"role":"system","content":"%s"},{"role":"user","content":"%s"}]}' "$1" "$sys" "$2"; }
record chat_cold.json "${auth[@]}" "${json[@]}" -d "$(chat '' 'first question')" "$base/v1/chat/completions"
record chat_warm.json "${auth[@]}" "${json[@]}" -d "$(chat '' 'second question')" "$base/v1/chat/completions"
record chat_stream.sse "${auth[@]}" "${json[@]}" -d "$(chat '"stream":true,"stream_options":{"include_usage":true},' 'third question')" "$base/v1/chat/completions"
record completions.json "${auth[@]}" "${json[@]}" -d '{"model":"tiny","max_tokens":4,"temperature":0,"prompt":"Once upon a time"}' "$base/v1/completions"
msg() { printf '{"model":"tiny","max_tokens":4,"temperature":0,%s"system":"%s","messages":[{"role":"user","content":"%s"}]}' "$1" "$sys" "$2"; }
record messages.json "${auth[@]}" "${json[@]}" -d "$(msg '' 'fourth question')" "$base/v1/messages"
record messages_stream.sse "${auth[@]}" "${json[@]}" -d "$(msg '"stream":true,' 'fifth question')" "$base/v1/messages"
record responses.json "${auth[@]}" "${json[@]}" -d "{\"model\":\"tiny\",\"max_output_tokens\":4,\"instructions\":\"$sys\",\"input\":\"sixth question\"}" "$base/v1/responses"
echo "status $(status "$base/v1/models")" >"$out/models_nokey.txt"
record models.json "${auth[@]}" "$base/v1/models"
record metrics.txt "${auth[@]}" "$base/metrics" # after the requests: counters above 0
record props.json "${auth[@]}" "$base/props"
record slots.json "${auth[@]}" "$base/slots"
echo "recorded $(ls "$out" | wc -l) files into $out from $header" >&2
