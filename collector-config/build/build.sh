#!/usr/bin/env bash
# Builds the stack's two programs from their pinned Go modules, through the Go module proxy only:
#   otelcol-compaction: the OpenTelemetry Collector with exactly the components that
#                       collector-config/otel-collector.yaml uses (otelcol/, Collector v0.165.0,
#                       contrib v0.165.1)
#   jaeger:             Jaeger v2 (jaeger/, a tool dependency: github.com/jaegertracing/jaeger v1.75.0)
# Two modules, not one: Jaeger v1.75.0 is built on Collector v0.139.0, and one module would
# force both programs onto a single Collector release.
#
#   bash collector-config/build/build.sh [BIN_DIR]     (default: .tools/bin of the repository)
#
# A program is rebuilt only when its module files changed since it was built (a stamp beside
# it records their checksum).
set -euo pipefail
shopt -s nullglob
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${1:-$root/.tools/bin}"
mkdir -p "$bin"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod -trimpath"

build() { # name, module directory, package
    local name="$1" module="$2" package="$3" stamp sum
    stamp="$bin/.$name.stamp"
    sum="$(cat "$here/$module"/go.mod "$here/$module"/go.sum "$here/$module"/*.go | sha256sum | cut -d' ' -f1)"
    if [ -x "$bin/$name" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ]; then
        echo "$name: already built for these pins ($bin/$name)"
        return
    fi
    local started=$SECONDS
    (cd "$here/$module" && go build -o "$bin/$name" "$package")
    echo "$sum" >"$stamp"
    echo "$name: built in $((SECONDS - started))s ($bin/$name)"
}

build otelcol-compaction otelcol .
build jaeger jaeger github.com/jaegertracing/jaeger/cmd/jaeger
