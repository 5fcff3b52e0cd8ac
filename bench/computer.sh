#!/bin/sh
# Measures the Computer targets of the issue on this host, printing the
# load before and after (a 2-CPU host shared with other work is noisy):
#
#   create → first exec    ≤ 50 ms p50 (process), ≤ 150 ms (container)
#   wake → first exec      ≤ 100 ms p50 (container)
#   exec round trip        ≤ 5 ms p50 (through the API, with a grant)
#   files.writeBytes 64 MiB ≥ 50% of the disk's own write speed (ratio-%)
#
# The container benchmarks need root, crun or runc and busybox-static;
# they skip, saying why, without them. N sets the iterations (default 20).
set -eu
cd "$(dirname "$0")/.."
n=${N:-20}
echo "load before: $(uptime)"
go test -run '^$' -bench . -benchtime "${n}x" ./internal/computer/ ./internal/computerapi/
echo "load after: $(uptime)"
