#!/usr/bin/env bash
# A Docker-compatible engine for the container tests, without a registry.
#
#   eval "$(bash scripts/container-engine.sh)"   # start (or reuse) one; prints `export ...`
#   bash scripts/container-engine.sh stop          # stop the API service this script started
#   bash scripts/container-engine.sh status        # say what answers, exit 0 if something does
#
# 1. A Docker engine that already answers (`docker info`, honouring DOCKER_HOST) is used.
# 2. Else, where apt-get exists: podman from Debian's packages, configured for machines
#    like this one (runc, cgroupfs, file events, ulimits within our limits), its Docker API
#    (`podman system service`) on a Unix socket under $KSTORM_ENGINE_DIR, PID recorded.
# 3. Either way the base image localhost/debian:bookworm exists afterwards (debootstrap
#    --variant=minbase + import; skipped when the image is there), for the Dockerfiles'
#    BASE_IMAGE build argument.
# Where none of this works: one line why on stderr, exit code 3, and on stdout
# `export KSTORM_CONTAINER_ENGINE_ERROR=...`, so the Docker tests report "not run", never pass.
#
# stdout carries only `export` lines (for eval); progress goes to stderr. A second run that
# finds the service and the image answering returns in well under a second.
set -euo pipefail

STATE_DIR=${KSTORM_ENGINE_DIR:-/tmp/kstorm-engine}  # short: a Unix socket path is <108 bytes
SOCK=$STATE_DIR/podman.sock
PIDFILE=$STATE_DIR/podman.pid
BASE_IMAGE=${KSTORM_BASE_IMAGE:-localhost/debian:bookworm}
SUITE=bookworm
CONF=/etc/containers/containers.conf
# dnsname: containers on a compose network find each other by service name (CNI, podman 4.3);
# a Recommends of podman, which --no-install-recommends leaves out.
PACKAGES=(podman buildah runc fuse-overlayfs slirp4netns uidmap debootstrap
  golang-github-containernetworking-plugin-dnsname)

log() { echo "container-engine: $*" >&2; }
no_engine() {
  echo "container-engine: no container engine: $*" >&2
  printf 'export KSTORM_CONTAINER_ENGINE_ERROR=%q\n' "$*"
  exit 3
}

answers() {  # answers [DOCKER_HOST]: a Docker API answers within 10 s
  if command -v docker > /dev/null; then
    DOCKER_HOST=${1:-${DOCKER_HOST:-}} timeout 10 docker info > /dev/null 2>&1
  elif [ -n "${1:-${DOCKER_HOST:-}}" ]; then
    local host=${1:-$DOCKER_HOST}
    [ "${host#unix://}" != "$host" ] &&
      curl -fsS --max-time 10 --unix-socket "${host#unix://}" http://d/_ping > /dev/null 2>&1
  else
    return 1
  fi
}

service_pid() {  # the PID of the API service we started, if it is still alive
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid=$(cat "$PIDFILE")
  [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null && echo "$pid"
}

stop_service() {
  local pid
  if pid=$(service_pid); then
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2> /dev/null && kill -KILL "$pid"
    log "stopped podman system service (pid $pid)"
  else
    log "no podman system service of ours is running"
  fi
  rm -f "$PIDFILE" "$SOCK"
}

install_podman() {
  local missing=()
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2> /dev/null | grep -q "install ok installed" ||
      missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get > /dev/null || no_engine "no Docker engine answers and there is no apt-get to install podman"
  [ "$(id -u)" -eq 0 ] || no_engine "no Docker engine answers and installing podman needs root"
  log "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" > "$STATE_DIR/apt.log" 2>&1 || {
    apt-get update -q > "$STATE_DIR/apt.log" 2>&1 &&
      apt-get install -y -q --no-install-recommends "${missing[@]}" >> "$STATE_DIR/apt.log" 2>&1
  } || no_engine "apt-get install ${missing[*]} failed (see $STATE_DIR/apt.log)"
}

configure_podman() {
  # crun fails here ("cgroups in hybrid mode not supported"), systemd is not PID 1, journald
  # is absent, and without CAP_SYS_RESOURCE podman's default ulimits cannot be set.
  local want
  want='# Written by kstorm scripts/container-engine.sh (issue 44).
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"'
  if [ -f "$CONF" ] && [ "$(cat "$CONF")" = "$want" ]; then return 0; fi
  mkdir -p "$(dirname "$CONF")"
  if [ -f "$CONF" ] && [ ! -f "$CONF.kstorm-backup" ]; then cp "$CONF" "$CONF.kstorm-backup"; fi
  printf '%s\n' "$want" > "$CONF"
  log "wrote $CONF"
}

start_service() {
  rm -f "$SOCK"
  # setsid: the service outlives this script and the caller's process group.
  setsid podman system service --time=0 "unix://$SOCK" > "$STATE_DIR/service.log" 2>&1 < /dev/null &
  echo $! > "$PIDFILE"
  for _ in $(seq 100); do
    answers "unix://$SOCK" && { log "podman system service on unix://$SOCK (pid $(cat "$PIDFILE"))"; return 0; }
    kill -0 "$(cat "$PIDFILE")" 2> /dev/null || break
    sleep 0.2
  done
  local why
  why=$(tail -n 1 "$STATE_DIR/service.log" 2> /dev/null || true)
  stop_service
  no_engine "podman system service did not answer on unix://$SOCK: ${why:-no output}"
}

debian_mirror() {  # the first Debian mirror apt uses, else deb.debian.org
  local uri
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2> /dev/null || true)
  [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $0 ~ /debian/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2> /dev/null || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

ensure_base_image() {  # ensure_base_image CLI...
  if "$@" image inspect "$BASE_IMAGE" > /dev/null 2>&1; then return 0; fi
  command -v debootstrap > /dev/null || {
    command -v apt-get > /dev/null && [ "$(id -u)" -eq 0 ] &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap > "$STATE_DIR/apt.log" 2>&1
  } || no_engine "cannot make $BASE_IMAGE: debootstrap is missing"
  local rootfs=$STATE_DIR/rootfs mirror started=$SECONDS
  mirror=$(debian_mirror)
  rm -rf "$rootfs"
  log "debootstrap --variant=minbase $SUITE from $mirror"
  debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror" > "$STATE_DIR/debootstrap.log" 2>&1 ||
    no_engine "debootstrap failed (see $STATE_DIR/debootstrap.log)"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  # The container's apt needs the same mirror (and not the host's snapshot pinning).
  echo "deb $mirror $SUITE main" > "$rootfs/etc/apt/sources.list"
  tar -C "$rootfs" -c . | "$@" import - "$BASE_IMAGE" > /dev/null ||
    no_engine "importing $BASE_IMAGE failed"
  rm -rf "$rootfs"
  log "made $BASE_IMAGE in $((SECONDS - started)) s"
}

print_exports() {  # print_exports ENGINE [DOCKER_HOST]
  echo "export KSTORM_CONTAINER_ENGINE=$1 KSTORM_BASE_IMAGE=$BASE_IMAGE"
  echo "unset KSTORM_CONTAINER_ENGINE_ERROR"
  [ -n "${2:-}" ] && echo "export DOCKER_HOST=$2"
  # The reaper image cannot be pulled without a registry; /.dockerenv exists on some VMs,
  # and testcontainers' gateway mode needs a HostConfig key podman 4.3 does not return.
  echo "export TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_CONNECTION_MODE=docker_host"
}

mkdir -p "$STATE_DIR"
case "${1:-start}" in
  stop) stop_service; exit 0 ;;
  status)
    if answers; then log "a Docker engine answers (${DOCKER_HOST:-default context})"; exit 0; fi
    if service_pid > /dev/null && answers "unix://$SOCK"; then log "ours answers on unix://$SOCK"; exit 0; fi
    log "nothing answers"; exit 3 ;;
  start) ;;
  *) echo "usage: $0 [start|stop|status]" >&2; exit 2 ;;
esac

# Step 1: a Docker engine that answers already (but not a stale socket of ours).
if [ "${DOCKER_HOST:-}" != "unix://$SOCK" ] && answers; then
  log "using the Docker engine that answers (${DOCKER_HOST:-default context})"
  ensure_base_image docker
  print_exports docker "${DOCKER_HOST:-}"
  exit 0
fi

# Step 2: our podman service, started now unless it is running from an earlier call.
install_podman  # a dpkg-query when nothing is missing
if service_pid > /dev/null && answers "unix://$SOCK"; then
  log "reusing podman system service (pid $(service_pid))"
else
  stop_service 2> /dev/null
  configure_podman
  podman info > "$STATE_DIR/podman-info.log" 2>&1 ||
    no_engine "podman info failed: $(grep -m1 -i error "$STATE_DIR/podman-info.log" || tail -n1 "$STATE_DIR/podman-info.log")"
  start_service
fi

# Step 3: the base image every Dockerfile builds from here.
ensure_base_image podman
print_exports podman "unix://$SOCK"
