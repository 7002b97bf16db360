#!/usr/bin/env bash
# Validates docker-compose.yml with `docker compose config`. Where the Docker client has no
# compose plugin (as on machines without a Docker engine), Compose v2 is built once from the Go
# module proxy into a cache and used the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
COMPOSE_VERSION=v2.29.7
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  # The same cache as bridge/devstack/paths.py: cache_dir().
  if [ -n "${PGBRIDGE_CACHE:-}" ]; then cache="$PGBRIDGE_CACHE"
  elif [ "$(id -u)" = 0 ]; then cache=/var/cache/pgbridge
  else cache="${XDG_CACHE_HOME:-$HOME/.cache}/pgbridge"; fi
  bin_dir="$cache/compose-$COMPOSE_VERSION"
  if [ ! -x "$bin_dir/cmd" ]; then
    command -v go >/dev/null || { echo "need 'docker compose' or Go to check docker-compose.yml" >&2; exit 1; }
    echo "building Docker Compose $COMPOSE_VERSION from the Go module proxy (once)"
    GOBIN="$bin_dir" GOFLAGS=-mod=mod go install "github.com/docker/compose/v2/cmd@$COMPOSE_VERSION"
  fi
  compose=("$bin_dir/cmd")
fi
"${compose[@]}" -f docker-compose.yml config --quiet
echo "docker-compose.yml: valid ($("${compose[@]}" -f docker-compose.yml config --services | tr '\n' ' '))"
