#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds a consumer
# against it twice: with find_package(sinew) and with pkg-config.
set -euo pipefail
build_dir=$1 src_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src_dir" -B "$tmp/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake" >/dev/null
"$tmp/cmake/consumer" | grep -q "ok 2 sinew"
flags=$(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --cflags --libs sinew)
c++ "$src_dir/main.cc" -o "$tmp/pc-consumer" $flags -Wl,-rpath,"$tmp/prefix/lib"
"$tmp/pc-consumer" | grep -q "ok 2 sinew"
"$tmp/prefix/bin/sinew" env >/dev/null
echo "install, find_package(sinew) and pkg-config consumers: ok"
