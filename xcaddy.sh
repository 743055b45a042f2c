#!/usr/bin/env bash
# xcaddy.sh: build Caddy with llmroute, run the demo, run the tests.
#
#   ./xcaddy.sh build   build ./caddy (Caddy v2.11.9 + llmroute) with xcaddy v0.4.5
#   ./xcaddy.sh demo    build, start two simulated replicas and caddy on :8080
#   ./xcaddy.sh test    run the whole test suite (what CI runs)
set -euo pipefail
cd "$(dirname "$0")"

CADDY_VERSION=v2.11.9
XCADDY_VERSION=v0.4.5
MODULE=github.com/llmroute/caddy-llmroute
export PATH="$PATH:$(go env GOPATH)/bin"

need_go() {
  command -v go >/dev/null || { echo "Go 1.26+ is required (https://go.dev/dl)" >&2; exit 1; }
}

build() {
  need_go
  if ! command -v xcaddy >/dev/null || ! xcaddy version 2>/dev/null | grep -q "${XCADDY_VERSION#v}"; then
    echo ">> installing xcaddy ${XCADDY_VERSION}"
    go install "github.com/caddyserver/xcaddy/cmd/xcaddy@${XCADDY_VERSION}"
  fi
  echo ">> building ./caddy (Caddy ${CADDY_VERSION} + ${MODULE}); a clean build takes ~3 min on 2 cores"
  XCADDY_SKIP_CLEANUP=0 xcaddy build "${CADDY_VERSION}" --with "${MODULE}@v0.0.0=./" --output ./caddy
  ./caddy list-modules | grep -E 'llm' || { echo "llmroute modules missing from ./caddy" >&2; exit 1; }
}

# stale reports whether ./caddy is missing or older than any Go source.
stale() {
  [ ! -x ./caddy ] && return 0
  [ -n "$(find . -name '*.go' -newer ./caddy -not -path './lab/*' -print -quit)" ]
}

demo() {
  need_go
  if stale; then build; fi
  mkdir -p bin
  go build -o bin/simreplica ./cmd/simreplica
  pids=()
  cleanup() {
    echo; echo ">> stopping"
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
  }
  trap cleanup EXIT INT TERM
  ./bin/simreplica -addr 127.0.0.1:9001 -name replica-a & pids+=($!)
  ./bin/simreplica -addr 127.0.0.1:9002 -name replica-b & pids+=($!)
  LLMROUTE_API_KEY=sk-demo ./caddy run --config Caddyfile.example --adapter caddyfile & pids+=($!)
  for _ in $(seq 1 50); do
    curl -s -o /dev/null http://127.0.0.1:8080/ 2>/dev/null && break
    sleep 0.2
  done
  cat <<'MSG'

llmroute demo: http://localhost:8080 (API key sk-demo), replicas on 127.0.0.1:9001 and :9002.
Try:
  curl -N http://localhost:8080/v1/chat/completions -H 'Authorization: Bearer sk-demo' -H 'Content-Type: application/json' -d '{"model":"demo","stream":true,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hi"}]}'
Router state:  curl -s localhost:2019/llm_route/state
Metrics:       curl -s localhost:2019/metrics | grep llmroute_
Switch policy: curl -X PATCH localhost:2019/config/apps/http/servers/srv0/routes/0/handle/1/load_balancing/selection_policy/strategy -H 'Content-Type: application/json' -d '"least_load"'
Ctrl-C stops everything.
MSG
  wait
}

# tests runs every module's tests: the plugin's (this directory) and the
# lab's (lab/: simulator, experiments, bench, real engine; its own go.mod so
# that the plugin's requires nothing the lab needs).
tests() {
  need_go
  go vet ./...
  (cd lab && go vet ./...)
  test -z "$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
  if stale; then build; fi
  go test -count=1 -timeout 20m ./...
  (cd lab && go test -count=1 -timeout 10m ./...)
}

case "${1:-}" in
  build) build ;;
  demo) demo ;;
  test) tests ;;
  *) echo "usage: $0 build|demo|test" >&2; exit 2 ;;
esac
