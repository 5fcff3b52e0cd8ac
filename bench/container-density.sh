#!/usr/bin/env bash
# bench/container-density.sh — how many container replicas one host holds:
# starts N (default 200) replicas of a small app (busybox httpd) on the
# container driver through a real berth, and reports the time until all of
# them are ready and the memory each idle replica costs.
#
# What it does:
#   1. builds a static berth (CGO_ENABLED=0: it is also the containers'
#      init) and a busybox root filesystem (Debian package busybox-static);
#   2. creates a network namespace berth-bench-<random> and runs everything
#      network-facing inside it (berth host setup makes the bridge there,
#      berth serve listens on its loopback), so guest addresses exist only in
#      the namespace and nothing leaves the machine;
#   3. imports the image, registers one container deployment with
#      min_replicas = max_replicas = N (size class micro), and polls
#      GET /deployments/<id> until N replicas are ready (bounded by TIMEOUT);
#   4. lets them idle for IDLE seconds, then reads the memory of every
#      replica's cgroup (the kernel's accounting of its processes, page
#      cache and kernel memory) and MemAvailable before and after;
#   5. sends one request through berth's proxy to check the pool serves;
#   6. deletes the deployment, waits for every replica to go, and checks that
#      no veth, cgroup, mount or replica directory is left.
# Everything it starts is stopped on exit (trap): berth, the namespace, the
# temporary directory. Every wait is bounded.
#
# Environment knobs (defaults in brackets):
#   N [200]         replicas
#   TIMEOUT [600]   seconds to wait for them to be ready
#   IDLE [10]       seconds of idling before memory is read
#   PORT_BASE [19080] admin port (proxy: PORT_BASE+1), on the namespace's loopback
#   BERTH_OCI_RUNTIME [crun, else runc]
#   BERTH_BIN [unset: CGO_ENABLED=0 go build ./cmd/berth]  a prebuilt static berth
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin:/usr/local/go/bin"
cd "$(dirname "$0")/.."
ROOT=$(pwd)
N=${N:-200}
TIMEOUT=${TIMEOUT:-600}
IDLE=${IDLE:-10}
PORT_BASE=${PORT_BASE:-19080}
ADMIN=127.0.0.1:$PORT_BASE
PROXY=127.0.0.1:$((PORT_BASE + 1))
DEP=density

[ "$(id -u)" = 0 ] || { echo "needs root (namespaces, mounts, cgroups)" >&2; exit 1; }
for b in ip nsenter curl jq busybox; do
	command -v "$b" >/dev/null || { echo "needs $b" >&2; exit 1; }
done

T=$(mktemp -d /tmp/bd.XXXXXX)
NS=berth-bench-$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')
BERTH_PID=
cleanup() {
	set +e
	if [ -n "$BERTH_PID" ]; then
		kill "$BERTH_PID" 2>/dev/null
		wait "$BERTH_PID" 2>/dev/null
	fi
	# Replicas outlive berth by design: stop any that are left.
	if [ -d "$T/data/containers" ]; then
		for d in "$T"/data/containers/berth-*; do
			[ -d "$d" ] || continue
			pid=$(jq -r .pid "$d/state.json" 2>/dev/null)
			[ -n "$pid" ] && [ "$pid" != 0 ] && kill -9 "$pid" 2>/dev/null
			umount -l "$d/rootfs" 2>/dev/null
		done
		for r in crun runc; do
			command -v $r >/dev/null || continue
			for c in $($r --root "$T/data/containers/.runtime" list -q 2>/dev/null); do
				$r --root "$T/data/containers/.runtime" delete -f "$c" 2>/dev/null
			done
		done
	fi
	ip netns del "$NS" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT

in_ns() { nsenter --net=/run/netns/"$NS" -- "$@"; }

if [ -n "${BERTH_BIN:-}" ]; then
	BERTH=$BERTH_BIN
else
	echo "== building a static berth"
	CGO_ENABLED=0 go build -o "$T/berth" ./cmd/berth
	BERTH=$T/berth
fi

echo "== busybox root filesystem"
R=$T/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/proc" "$R/sys" "$R/dev" "$R/tmp" "$R/root" "$R/www"
cp "$(command -v busybox)" "$R/bin/busybox"
for a in $("$R/bin/busybox" --list); do [ "$a" = busybox ] || ln -s busybox "$R/bin/$a"; done
echo ok > "$R/www/index.html"
echo 'root:x:0:0:root:/root:/bin/sh' > "$R/etc/passwd"

echo "== namespace $NS"
ip netns add "$NS"
ip -n "$NS" link set lo up
in_ns "$BERTH" host setup --data-dir "$T/data"

echo "== berth serve"
# nsenter itself, not the in_ns function: a backgrounded function is a
# subshell, and $! must be berth (nsenter execs it).
nsenter --net=/run/netns/"$NS" -- "$BERTH" serve --data-dir "$T/data" --admin-addr "$ADMIN" --proxy-addr "$PROXY" --log-level warn \
	>"$T/berth.log" 2>&1 &
BERTH_PID=$!
for _ in $(seq 100); do in_ns curl -sf "http://$ADMIN/healthz" >/dev/null && break; sleep 0.1; done
in_ns curl -sf "http://$ADMIN/healthz" >/dev/null || { cat "$T/berth.log"; exit 1; }
in_ns "$BERTH" --server "http://$ADMIN" image import busybox "$R"
in_ns curl -sf "http://$ADMIN/images" | jq -e '.images[0].name == "busybox"' >/dev/null

api() { in_ns curl -s -X "$1" "http://$ADMIN$2" ${3:+-H 'Content-Type: application/json' --data "$3"}; }
ready() { api GET "/deployments/$DEP" | jq -r '.ready // 0'; }

mem_avail() { awk '/MemAvailable/ {printf "%.0f\n", $2 * 1024}' /proc/meminfo; }
BEFORE=$(mem_avail)

echo "== starting $N replicas"
SPEC=$(jq -nc --arg id "$DEP" --argjson n "$N" '{id: $id, routes: [{host: "density.test"}],
	vm: {driver: "container", image: "busybox", port: 8080, size_class: "micro",
	     start_command: "exec httpd -f -p $PORT -h /www"},
	scaling: {min_replicas: $n, max_replicas: $n}}')
T0=$(date +%s%N)
api POST /deployments "$SPEC" | jq -e .spec.id >/dev/null
while :; do
	r=$(ready)
	[ "$r" -ge "$N" ] && break
	if [ $(( ($(date +%s%N) - T0) / 1000000000 )) -ge "$TIMEOUT" ]; then
		echo "only $r of $N ready after ${TIMEOUT}s" >&2
		tail -20 "$T/berth.log" >&2
		exit 1
	fi
	sleep 0.2
done
T1=$(date +%s%N)
ALL_MS=$(( (T1 - T0) / 1000000 ))
echo "all $N ready in ${ALL_MS} ms"

sleep "$IDLE"
AFTER=$(mem_avail)
CG=0
PSS=0
COUNT=0
for d in "$T"/data/containers/berth-*; do
	pid=$(jq -r .pid "$d/state.json")
	cg=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' "/proc/$pid/cgroup")
	if [ -n "$cg" ] && [ -f "/sys/fs/cgroup/memory$cg/memory.usage_in_bytes" ]; then
		m=$(cat "/sys/fs/cgroup/memory$cg/memory.usage_in_bytes")
	else
		cg=$(awk -F: '$1 == "0" {print $3}' "/proc/$pid/cgroup")
		m=$(cat "/sys/fs/cgroup$cg/memory.current")
	fi
	CG=$((CG + m))
	COUNT=$((COUNT + 1))
	# Proportional set size of the replica's processes: shared pages (the
	# agent binary, busybox) divided among the processes that map them.
	procs=$(cat "/sys/fs/cgroup/memory$cg/cgroup.procs" 2>/dev/null || cat "/sys/fs/cgroup$cg/cgroup.procs")
	for p in $procs; do
		PSS=$((PSS + $(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0) * 1024))
	done
done
echo "replicas measured: $COUNT"
echo "memory per idle replica (its cgroup):       $((CG / COUNT / 1024)) KiB"
echo "memory per idle replica (processes' PSS):    $((PSS / COUNT / 1024)) KiB"
echo "memory per idle replica (MemAvailable drop): $(( (BEFORE - AFTER) / N / 1024 )) KiB (noisy on a shared machine)"
BERTH_RSS=$(awk '/VmRSS/ {print $2}' "/proc/$BERTH_PID/status" 2>/dev/null || echo 0)
echo "berth serve RSS with $N replicas: ${BERTH_RSS} KiB"

code=$(in_ns curl -s -o /dev/null -w '%{http_code}' -H 'Host: density.test' "http://$PROXY/")
[ "$code" = 200 ] || { echo "request through berth: HTTP $code" >&2; exit 1; }

echo "== deleting the deployment"
T2=$(date +%s%N)
api DELETE "/deployments/$DEP" >/dev/null
for _ in $(seq "$TIMEOUT"); do
	left=$(find "$T/data/containers" -maxdepth 1 -name 'berth-*' | wc -l)
	[ "$left" = 0 ] && break
	sleep 1
done
echo "all replicas gone in $(( ($(date +%s%N) - T2) / 1000000 )) ms"
veths=$(ip -n "$NS" -o link show | grep -c ' bv' || true)
cgroups=$(find /sys/fs/cgroup -maxdepth 3 -path '*/berth/berth-density-*' -type d 2>/dev/null | wc -l)
# The driver keeps a spare container for the image (its rootfs and netns
# mounts) while berth runs; it goes when berth stops, checked below.
mounts=$(grep "$T/data/containers" /proc/self/mountinfo | grep -vc '/\.spare-' || true)
echo "left behind: $left replica dirs, $veths veths, $cgroups cgroups, $mounts mounts"
[ "$left" = 0 ] && [ "$veths" = 0 ] && [ "$cgroups" = 0 ] && [ "$mounts" = 0 ]
echo "== stopping berth"
kill "$BERTH_PID"
wait "$BERTH_PID" 2>/dev/null || true
BERTH_PID=
spares=$(find "$T/data/containers" -maxdepth 1 -name '.spare-*' | wc -l)
mounts=$(grep -c "$T/data/containers" /proc/self/mountinfo || true)
echo "after berth stopped: $spares spare dirs, $mounts mounts"
[ "$spares" = 0 ] && [ "$mounts" = 0 ]
