#!/usr/bin/env bash
# Builds the Go end-to-end client offline: Go code generated from protos/pulsargrpc/v1 with
# protoc-gen-go and protoc-gen-go-grpc, compiled in GOPATH mode against the Debian packages
# under /usr/share/gocode (no module download). Output: tests/go/build/produce_consume.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$here/build"
gopath="$build/gopath"
rm -rf "$gopath"
mkdir -p "$gopath/src/pulsargrpc/v1" "$gopath/src/produce_consume"
# go_package "pulsargrpc/v1;pulsargrpcv1": the import path is the directory under GOPATH/src.
protoc -I"$root/protos" \
  --go_out="$gopath/src" --go_opt=paths=import \
  --go-grpc_out="$gopath/src" --go-grpc_opt=paths=import \
  "$root/protos/pulsargrpc/v1/pulsar.proto"
cp "$here/produce_consume/main.go" "$gopath/src/produce_consume/"
cd "$gopath/src/produce_consume"
GO111MODULE=off GOPATH="$gopath:/usr/share/gocode" GOCACHE="$build/cache" \
  go build -o "$build/produce_consume" .
echo "built $build/produce_consume"
