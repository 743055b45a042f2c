#!/usr/bin/env bash
# llmroute performance benchmark (issue #9). Run from anywhere:
#
#   lab/bench/run.sh            # full run, about 7 minutes on 2 cores -> lab/bench/results.json, .md
#   lab/bench/run.sh -quick     # smoke run, about 2 minutes -> lab/bench/results-quick.json, .md
#   lab/bench/run.sh -profile bench/profiles   # full run, then CPU/alloc profiles (dir relative to lab/)
#   lab/bench/run.sh -h         # every flag
#
# It raises the open-file limit, installs HAProxy (Debian package) when it
# is missing and this runs as root with apt-get (LLMBENCH_NO_APT=1 to skip;
# without HAProxy the run skips that target), then runs
# `go run ./bench/cmd/llmbench` in lab/, which builds lab/bench/caddy-bench
# from the repository's ./cmd/caddy. Everything listens on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

if ! command -v haproxy >/dev/null 2>&1 && [ -z "${LLMBENCH_NO_APT:-}" ] \
	&& [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "bench/run.sh: installing haproxy with apt-get (LLMBENCH_NO_APT=1 to skip)" >&2
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy >/dev/null 2>&1; then
		apt-get update -q >/dev/null 2>&1 || true
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy >/dev/null 2>&1 \
			|| echo "bench/run.sh: could not install haproxy; its target will be skipped" >&2
	fi
fi

exec go run ./bench/cmd/llmbench "$@"
