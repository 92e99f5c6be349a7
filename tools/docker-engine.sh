#!/usr/bin/env bash
# Make `docker build` and `docker compose up` work on a development machine
# that has no Docker engine and cannot pull from Docker Hub.
#
#   tools/docker-engine.sh          # idempotent; prints what it did
#
# 1. Installs Debian's docker.io and docker-compose (v1 client) if missing.
# 2. Starts dockerd (vfs storage driver) if it is not answering.
# 3. Builds local stand-ins for the two base images compose.yaml names, since
#    no registry but PyPI/Debian/npm can be reached:
#      python:3.11-slim  - Debian bookworm (debootstrap) + Debian's python3.11,
#                          pip, venv; `python`/`pip` on PATH; this machine's CA
#                          bundle so pip inside builds reaches PyPI.
#      redis:7.2-alpine  - the above + Debian's redis-server (7.0), protected
#                          mode off by default like the official image.
#    They are stand-ins: the real images differ (Python 3.11.2 from Debian, not
#    3.11.x from source; Debian, not Alpine), so keep the Dockerfile portable.
# Then: `docker-compose build && docker-compose up -d` (or `docker compose` if
# a v2 client is present). Remove everything with `docker-compose down -v`.
set -euo pipefail
log() { echo "docker-engine: $*"; }

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /tmp/dockerd.log)"
  nohup dockerd --storage-driver=vfs >/tmp/dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not come up; see /tmp/dockerd.log"; exit 1; }
fi

if ! docker image inspect python:3.11-slim >/dev/null 2>&1; then
  root=$(mktemp -d /tmp/standin-rootfs.XXXX) && chmod 755 "$root"   # it becomes "/": non-root users must traverse it
  log "debootstrap bookworm into $root (about a minute)"
  # The Debian mirror this machine's apt already uses (deb822 sources or a classic sources.list).
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/{print $2}' | grep -E '/debian/?$' | head -n 1)
  [ -n "$mirror" ] || mirror=$(awk '$1=="deb"{print $2}' /etc/apt/sources.list 2>/dev/null | grep -E '/debian/?$' | head -n 1)
  [ -n "$mirror" ] || { log "no Debian mirror found in apt's sources"; exit 1; }
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$root" "$mirror" >/tmp/standin-debootstrap.log 2>&1
  rm -f "$root"/usr/lib/python3.11/EXTERNALLY-MANAGED
  ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
  ln -sf /usr/bin/pip3 "$root/usr/local/bin/pip"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"
  tar -C "$root" -c . | docker import \
    -c 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'CMD ["python3"]' - python:3.11-slim >/dev/null
  rm -rf "$root"
  log "built stand-in python:3.11-slim"
fi

if ! docker image inspect redis:7.2-alpine >/dev/null 2>&1; then
  ctx=$(mktemp -d /tmp/standin-redis.XXXX)
  cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM python:3.11-slim
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null \
    && rm -rf /var/lib/apt/lists/*
RUN printf '#!/bin/sh\nexec /usr/bin/redis-server "$@" --protected-mode no\n' >/usr/local/bin/redis-server \
    && chmod +x /usr/local/bin/redis-server
WORKDIR /data
CMD ["redis-server"]
DOCKERFILE
  docker build -q -t redis:7.2-alpine "$ctx" >/dev/null 2>&1
  rm -rf "$ctx"
  log "built stand-in redis:7.2-alpine"
fi
log "ready: $(docker version --format '{{.Server.Version}}') engine, images: python:3.11-slim redis:7.2-alpine"
