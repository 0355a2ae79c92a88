#!/usr/bin/env bash
# Builds the Kubernetes API server and etcd that `make test-k8s` runs the
# discovery test against, into bin/: kube-apiserver from the k8s.io/kubernetes
# module at KUBE_VERSION (through the Go module proxy), etcd from Debian's
# etcd-server package when it is installed, else from the etcd server module.
# k8s.io/kubernetes names its staging modules (k8s.io/api, k8s.io/apiserver,
# ...) through ./staging replace directives that its module zip does not
# carry; the copy built here requires their published v0.MINOR.PATCH
# releases instead, which are the same code.
set -euo pipefail
cd "$(dirname "$0")/../.."
KUBE_VERSION=${KUBE_VERSION:-v1.34.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.13}
out=$PWD/bin
mkdir -p "$out"
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

if [ ! -x "$out/kube-apiserver" ]; then
	dir=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	cp -r "$dir" "$work/kubernetes"
	chmod -R u+w "$work/kubernetes"
	cd "$work/kubernetes"
	rm -f go.work go.work.sum
	staging=${KUBE_VERSION/v1./v0.}
	for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging/ {print $1}' go.mod); do
		go mod edit -dropreplace="$m" -require="$m@$staging"
	done
	GOFLAGS=-mod=mod go build -trimpath -ldflags "-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION" \
		-o "$out/kube-apiserver" ./cmd/kube-apiserver
	cd - >/dev/null
fi
if [ ! -x "$out/etcd" ]; then
	if [ -x /usr/bin/etcd ]; then
		ln -sf /usr/bin/etcd "$out/etcd"
	else
		GOBIN=$out go install "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
		mv "$out/server" "$out/etcd" 2>/dev/null || true
	fi
fi
"$out/kube-apiserver" --version
"$out/etcd" --version | sed -n 1p
