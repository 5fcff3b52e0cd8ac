#!/bin/sh
# Measures the hop between hosts (package internal/fleet/hop) across two
# network namespaces this script makes, joined by a veth pair: a
# keep-alive GET from namespace A to a handler in namespace B directly
# (plain HTTP/1.1), and through the hop (mutual TLS with fleet CA
# certificates; hop client in A → hop server in B → the handler) over
# HTTP/1.1 and h2. It prints BenchmarkHop's p50/p99 of each path and the
# hop's added latency (target: p50 ≤ 0.5 ms). Needs root (ip netns); the
# namespaces, the veth pair and the temporary files go on exit.
#
# N sets the requests per run (default 2000), COUNT the runs (default 3).
set -eu
cd "$(dirname "$0")/.."
n=${N:-2000}
count=${COUNT:-3}
if [ "$(id -u)" != 0 ]; then
	echo "bench/hop.sh: needs root (ip netns, a veth pair)" >&2
	exit 1
fi
tag=$$
nsa=berth-hop-a-$tag
nsb=berth-hop-b-$tag
va=vhopa$tag
vb=vhopb$tag
net=10.213.$((tag % 250))
work=$(mktemp -d)
srv=
cleanup() {
	if [ -n "$srv" ]; then
		kill "$srv" 2>/dev/null || true
		wait "$srv" 2>/dev/null || true
	fi
	ip netns del "$nsa" 2>/dev/null || true
	ip netns del "$nsb" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go test -c -o "$work/hop.test" ./internal/fleet/hop
ip netns add "$nsa"
ip netns add "$nsb"
ip link add "$va" type veth peer name "$vb"
ip link set "$va" netns "$nsa"
ip link set "$vb" netns "$nsb"
ip -n "$nsa" addr add "$net.1/30" dev "$va"
ip -n "$nsb" addr add "$net.2/30" dev "$vb"
for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; done
ip -n "$nsa" link set "$va" up
ip -n "$nsb" link set "$vb" up

HOP_BENCH_SERVE=$net.2 HOP_BENCH_DIR=$work ip netns exec "$nsb" "$work/hop.test" -test.run '^TestBenchPeer$' -test.timeout 6m &
srv=$!
i=0
until [ -e "$work/ready" ]; do
	i=$((i + 1))
	if [ $i -gt 600 ] || ! kill -0 "$srv" 2>/dev/null; then
		echo "bench/hop.sh: the server end did not start" >&2
		exit 1
	fi
	sleep 0.1
done

echo "load before: $(uptime)"
HOP_BENCH_PEER=$net.2 HOP_BENCH_DIR=$work ip netns exec "$nsa" "$work/hop.test" -test.run '^$' -test.bench '^BenchmarkHop$' -test.benchtime "${n}x" -test.count "$count" | tee "$work/out"
echo "load after: $(uptime)"
# The mean over the runs of each path's p50 and p99, and the hop's
# difference from the direct GET.
awk '
/^BenchmarkHop\// {
	name = $1; sub(/^BenchmarkHop\//, "", name); sub(/-[0-9]+$/, "", name)
	for (i = 1; i < NF; i++) {
		if ($(i + 1) == "p50-µs") p50[name] += $i
		if ($(i + 1) == "p99-µs") p99[name] += $i
	}
	runs[name]++
}
END {
	printf "\n%-10s %10s %10s\n", "path", "p50 µs", "p99 µs"
	for (k in runs) printf "%-10s %10.1f %10.1f\n", k, p50[k] / runs[k], p99[k] / runs[k]
	d50 = p50["direct"] / runs["direct"]; d99 = p99["direct"] / runs["direct"]
	for (k in runs) if (k != "direct")
		printf "%s − direct: p50 %+.1f µs, p99 %+.1f µs\n", k, p50[k] / runs[k] - d50, p99[k] / runs[k] - d99
}' "$work/out"
