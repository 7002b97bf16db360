#!/usr/bin/env bash
# Validates docker-compose.yml as `docker compose config` does. Where the Docker client has no
# compose plugin (as on machines without a Docker engine), dev-stack/compose-check (Compose's
# own loader, compose-go, the version Docker Compose v2.29 uses) is built once from the Go
# module proxy into a cache and used instead: ~20 s of build the first time, where building
# all of Docker Compose took 90 s and 140 CPU-seconds of `make test` on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
if docker compose version >/dev/null 2>&1; then
  docker compose -f docker-compose.yml config --quiet
  services=$(docker compose -f docker-compose.yml config --services | tr '\n' ' ')
else
  # The same cache as bridge/devstack/paths.py: cache_dir().
  if [ -n "${PGBRIDGE_CACHE:-}" ]; then cache="$PGBRIDGE_CACHE"
  elif [ "$(id -u)" = 0 ]; then cache=/var/cache/pgbridge
  else cache="${XDG_CACHE_HOME:-$HOME/.cache}/pgbridge"; fi
  # Rebuilt when its source or pinned modules change.
  digest=$(cat dev-stack/compose-check/go.mod dev-stack/compose-check/go.sum \
    dev-stack/compose-check/main.go | sha256sum | cut -c1-12)
  checker="$cache/compose-check-$digest/compose-check"
  if [ ! -x "$checker" ]; then
    command -v go >/dev/null || { echo "need 'docker compose' or Go to check docker-compose.yml" >&2; exit 1; }
    echo "building dev-stack/compose-check from the Go module proxy (once)"
    mkdir -p "$(dirname "$checker")"
    (cd dev-stack/compose-check && go build -o "$checker.tmp" . && mv "$checker.tmp" "$checker")
  fi
  services=$("$checker" docker-compose.yml)
fi
echo "docker-compose.yml: valid ($services)"
