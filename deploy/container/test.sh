#!/usr/bin/env bash
# The container image's test (make image-test): builds deploy/container/Containerfile
# with podman and checks what a user runs.
#
# No container registry is reachable from the machines this project is built
# on, so the base images the Containerfile names are assembled here under the
# same names when they are missing: docker.io/library/debian:bookworm-slim is
# a debootstrap'd Debian bookworm (minbase), and
# docker.io/library/golang:1.26-bookworm is that Debian with gcc, pkg-config,
# this machine's Go toolchain ($(go env GOROOT)) at /usr/local/go and its
# local certificate authorities. With
# real base images present (a registry reached earlier) they are used as
# they are.
#
# Then: `make image`; the image's user is 65532; it runs with a read-only
# root filesystem and a state volume, answers /health and its HEALTHCHECK,
# registers a fake engine running on the host and answers a query with a
# real hit; after a restart the registration is restored from the volume.
set -euo pipefail
cd "$(dirname "$0")/../.."
IMAGE=${IMAGE:-conductor:test}
NAME=conductor-image-test-$$
VOLUME=$NAME-state
TOKEN=image-test-admin-token-0123456789
WORK=$(mktemp -d)
engine_pid=""

cleanup() {
	[ -z "$engine_pid" ] || kill "$engine_pid" 2>/dev/null || true
	podman rm -f "$NAME" >/dev/null 2>&1 || true
	podman volume rm -f "$VOLUME" >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "image-test: $*" >&2; podman logs "$NAME" 2>&1 | tail -40 >&2 || true; exit 1; }

if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
	echo "installing podman and debootstrap (apt-get)"
	SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq podman runc debootstrap uidmap >/dev/null
fi

# Hosts without CAP_SYS_RESOURCE cannot raise a container's rlimits past
# their own hard limits (podman's defaults ask for more), and crun refuses
# hybrid cgroup hierarchies (runc takes them): give podman a configuration
# that fits such a host.
if ! grep -q '^CapEff:.*[13579bdf]......$' /proc/self/status 2>/dev/null || [ -d /sys/fs/cgroup/unified ]; then
	nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
	[ "$nofile" = unlimited ] && nofile=1048576
	{ [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
	{
		echo '[containers]'
		echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
		if [ -d /sys/fs/cgroup/unified ] && command -v runc >/dev/null; then printf '[engine]\nruntime = "runc"\n'; fi
	} >"$WORK/containers.conf"
	export CONTAINERS_CONF="$WORK/containers.conf"
fi

# Base images, assembled when absent.
DEBIAN_IMAGE=docker.io/library/debian:bookworm-slim
GO_IMAGE=docker.io/library/golang:1.26-bookworm
if ! podman image exists "$DEBIAN_IMAGE"; then
	echo "assembling $DEBIAN_IMAGE (debootstrap bookworm, minbase)"
	debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 ||
		{ tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
	rm -rf "$WORK/rootfs/var/cache/apt/archives"/*.deb "$WORK/rootfs/var/lib/apt/lists"/*
	tar -C "$WORK/rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$DEBIAN_IMAGE" >/dev/null
	rm -rf "$WORK/rootfs"
fi
if ! podman image exists "$GO_IMAGE"; then
	goroot=$(go env GOROOT)
	echo "assembling $GO_IMAGE ($DEBIAN_IMAGE + gcc, pkg-config + $(go version | cut -d' ' -f3) from $goroot)"
	mkdir -p "$WORK/go-image/ca"
	cp -a "$goroot" "$WORK/go-image/go"
	# The machine's own certificate authorities (an egress proxy's, where
	# the module proxy is reached through one) come along.
	cp /usr/local/share/ca-certificates/*.crt "$WORK/go-image/ca/" 2>/dev/null || true
	cat >"$WORK/go-image/Containerfile" <<-EOF
	FROM $DEBIAN_IMAGE
	RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config ca-certificates git \
	 && rm -rf /var/lib/apt/lists/*
	COPY ca/ /usr/local/share/ca-certificates/
	RUN update-ca-certificates
	COPY go /usr/local/go
	ENV GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin GOTOOLCHAIN=local
	WORKDIR /go
	EOF
	podman build -q -t "$GO_IMAGE" "$WORK/go-image" >/dev/null
	rm -rf "$WORK/go-image"
fi

# The image, from the real Containerfile.
make --no-print-directory image IMAGE="$IMAGE" IMAGE_BUILD_ARGS="--build-arg GOPROXY=$(go env GOPROXY)"
user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
[ "$user" = "65532:65532" ] || fail "image user $user, want 65532:65532"

# A fake vLLM engine on the host, reached from the container through the
# host's address on podman's network (host.containers.internal).
pub_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
replay_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
http_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
bin/fake-engine -dialect vllm-map -algorithm sha256 -seed 0 -pub "tcp://*:$pub_port" -replay "tcp://*:$replay_port" -tokens 64 \
	>"$WORK/engine.log" 2>&1 &
engine_pid=$!

start() {
	podman run -d --name "$NAME" --read-only -v "$VOLUME:/var/lib/conductor" -p "127.0.0.1:$http_port:13333" \
		-e CONDUCTOR_ADMIN_TOKEN="$TOKEN" "$IMAGE" >/dev/null
}
wait_ready() {
	for _ in $(seq 1200); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http_port/health")" = 200 ] && return 0
		podman container exists "$NAME" && [ "$(podman inspect --format '{{.State.Running}}' "$NAME")" = true ] ||
			fail "the container stopped"
		sleep 0.1
	done
	fail "/health not 200 within 2 minutes"
}
query_hit() {
	for _ in $(seq 1200); do
		out=$(curl -s "http://127.0.0.1:$http_port/query" -H "Authorization: Bearer $TOKEN" -d '{"model": "qwen3-8b", "block_size": 16,
		  "token_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]}')
		case $out in *'"vllm-node1":{"longest_matched":32,'*) return 0 ;; esac
		sleep 0.1
	done
	fail "no hit for the engine's prompt within 2 minutes: $out"
}

start
wait_ready
uid=$(podman exec "$NAME" sh -c 'grep ^Uid: /proc/1/status' | awk '{print $2}')
[ "$uid" = 65532 ] || fail "the process runs as uid $uid, want 65532"
if podman exec "$NAME" sh -c 'touch /usr/local/bin/x' 2>/dev/null; then fail "the root filesystem is writable"; fi
podman healthcheck run "$NAME" || fail "HEALTHCHECK failed"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http_port/register" -d '{}')
[ "$code" = 401 ] || fail "/register without the admin token answered $code, want 401"
reg='{"endpoint": "tcp://host.containers.internal:'$pub_port'", "replay_endpoint": "tcp://host.containers.internal:'$replay_port'",
  "type": "vLLM", "modelname": "qwen3-8b", "instance_id": "vllm-node1", "dp_rank": 0, "block_size": 16,
  "hash_profile": {"strategy": "vllm_v1", "algorithm": "sha256", "python_hash_seed": "0", "index_projection": "low64_be"}}'
out=$(curl -s "http://127.0.0.1:$http_port/register" -H "Authorization: Bearer $TOKEN" -d "$reg")
case $out in *'registered successfully'*) ;; *) fail "register: $out" ;; esac
query_hit
echo "image-test: a hit through the image"

podman restart "$NAME" >/dev/null
wait_ready
query_hit
echo "image-test: the registration came back from the state volume after a restart"
echo "image-test: ok ($IMAGE, $(podman image inspect --format '{{.Size}}' "$IMAGE") bytes)"
