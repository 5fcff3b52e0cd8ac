#!/usr/bin/env bash
# bench/proxy.sh — berth's data plane against nginx and haproxy, in one run.
#
# What it does, all on 127.0.0.1:
#   1. installs nginx, haproxy and wrk with apt-get when missing (needs root);
#   2. builds berth, bench/upstream (the fixed backend) and bench/load (the
#      constant-rate load generator);
#   3. starts ONE upstream (Go, GOMAXPROCS=1, 100-byte body) that every run
#      uses, then berth, nginx (1 worker, upstream keepalive) and haproxy
#      (nbthread 1, http-reuse always), all pointing at it;
#   4. peak runs with wrk (warm-up, then a fixed duration, --latency): the
#      upstream directly, then through each proxy; for each it reads the
#      proxy's utime+stime from /proc/<pid>/stat (all of its processes) before
#      and after, and divides by the requests wrk completed;
#   5. half-load runs with bench/load at half of berth's peak rate: the same
#      constant rate straight to the upstream and through each proxy; the
#      added p99 is the proxy's p99 minus the direct p99;
#   6. prints a table and writes it to bench/out/.
# Every process it starts is stopped on exit (trap), every run is bounded.
#
# Environment knobs (defaults in brackets):
#   DURATION [10]  seconds of each measured wrk run
#   WARMUP   [3]   seconds of wrk warm-up before each measured run
#   CONNS    [50]  wrk connections (wrk uses one thread)
#   HALF_DURATION [8]  seconds of each half-load run (after 2 s of warm-up)
#   BERTH_GOMAXPROCS [unset: Go's default, one per core]  GOMAXPROCS for berth
#   PORT_BASE [18080]  first of five consecutive ports used
#   BERTH_BIN [unset: go build ./cmd/berth]  a prebuilt berth binary to use
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-3}
CONNS=${CONNS:-50}
HALF_DURATION=${HALF_DURATION:-8}
PORT_BASE=${PORT_BASE:-18080}
P_UP=$PORT_BASE
P_BERTH=$((PORT_BASE + 1))
P_ADMIN=$((PORT_BASE + 2))
P_NGINX=$((PORT_BASE + 3))
P_HAPROXY=$((PORT_BASE + 4))
HZ=$(getconf CLK_TCK)

log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
	log "error: $*"
	local f
	for f in "${WORK:-/nonexistent}"/*.log "${WORK:-/nonexistent}"/nginx/logs/error.log; do
		[[ -s $f ]] && { echo "--- $f" >&2; tail -5 "$f" >&2; }
	done
	exit 1
}

# ---- 1. tools ----------------------------------------------------------------
missing=()
for c in nginx haproxy wrk; do command -v "$c" >/dev/null || missing+=("$c"); done
if ((${#missing[@]})); then
	[[ $(id -u) == 0 ]] || die "need root to install ${missing[*]}"
	log "installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"

WORK=$(mktemp -d /tmp/berth-bench.XXXXXX)
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do
		# Wait up to 5 s, then insist.
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 2. build ----------------------------------------------------------------
log "building berth, bench/upstream, bench/load"
if [[ -n ${BERTH_BIN:-} ]]; then
	cp "$BERTH_BIN" "$WORK/berth"
else
	go build -o "$WORK/berth" ./cmd/berth
fi
go build -o "$WORK/upstream" ./bench/upstream
go build -o "$WORK/load" ./bench/load

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
	local i
	for i in $(seq 100); do port_open "$1" && return 0; sleep 0.1; done
	die "nothing listens on 127.0.0.1:$1 after 10 s (see $WORK/*.log)"
}
for p in $P_UP $P_BERTH $P_ADMIN $P_NGINX $P_HAPROXY; do
	port_open "$p" && die "port $p is already in use; set PORT_BASE"
done

# ---- 3. servers --------------------------------------------------------------
"$WORK/upstream" -addr "127.0.0.1:$P_UP" 2>"$WORK/upstream.log" &
PID_UP=$!; PIDS+=("$PID_UP")

mkdir -p "$WORK/berth-data"
(
	[[ -n ${BERTH_GOMAXPROCS:-} ]] && export GOMAXPROCS=$BERTH_GOMAXPROCS
	# Only process replicas here: leave the host's bridge and cgroups as
	# they are (an env var, so that older binaries under BERTH_BIN run too).
	export BERTH_NO_HOST_SETUP=1
	exec "$WORK/berth" serve --proxy-addr "127.0.0.1:$P_BERTH" --admin-addr "127.0.0.1:$P_ADMIN" \
		--data-dir "$WORK/berth-data" --log-level warn
) 2>"$WORK/berth.log" &
PID_BERTH=$!; PIDS+=("$PID_BERTH")

mkdir -p "$WORK/nginx/logs" "$WORK/nginx/tmp"
cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
master_process on;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path $WORK/nginx/tmp/body;
	proxy_temp_path $WORK/nginx/tmp/proxy;
	fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
	uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
	scgi_temp_path $WORK/nginx/tmp/scgi;
	upstream up {
		server 127.0.0.1:$P_UP;
		keepalive 128;
	}
	server {
		listen 127.0.0.1:$P_NGINX;
		location / {
			proxy_pass http://up;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header Host \$host;
			proxy_set_header X-Forwarded-For \$remote_addr;
			proxy_set_header X-Forwarded-Proto \$scheme;
		}
	}
}
EOF
nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" 2>"$WORK/nginx.log" &
PID_NGINX=$!; PIDS+=("$PID_NGINX")

cat >"$WORK/haproxy.cfg" <<EOF
global
	nbthread 1
	maxconn 4096
defaults
	mode http
	timeout connect 5s
	timeout client 30s
	timeout server 30s
	http-reuse always
	option forwardfor
frontend fe
	bind 127.0.0.1:$P_HAPROXY
	default_backend be
backend be
	server up 127.0.0.1:$P_UP
EOF
haproxy -db -f "$WORK/haproxy.cfg" 2>"$WORK/haproxy.log" &
PID_HAPROXY=$!; PIDS+=("$PID_HAPROXY")

for p in $P_UP $P_BERTH $P_ADMIN $P_NGINX $P_HAPROXY; do wait_port "$p"; done
curl -sf -X POST -H 'Content-Type: application/json' "http://127.0.0.1:$P_ADMIN/deployments" \
	-d "{\"id\":\"bench\",\"routes\":[{\"path_prefix\":\"/\"}],\"upstreams\":[\"127.0.0.1:$P_UP\"]}" >/dev/null ||
	die "registering the bench deployment with berth failed (see $WORK/berth.log)"
for p in $P_UP $P_BERTH $P_NGINX $P_HAPROXY; do
	# Every path answers 200 with the upstream's body before anything is measured.
	body=$(curl -sf --max-time 5 "http://127.0.0.1:$p/") || die "GET through port $p failed"
	[[ ${#body} -ge 99 ]] || die "port $p answered ${#body} bytes"
done

# ---- measuring helpers -------------------------------------------------------
# pids_of NAME: every process of a server (nginx: master and workers).
pids_of() {
	case $1 in
	direct) echo "$PID_UP" ;;
	berth) echo "$PID_BERTH" ;;
	nginx) echo "$PID_NGINX $(pgrep -P "$PID_NGINX" | tr '\n' ' ')" ;;
	haproxy) echo "$PID_HAPROXY $(pgrep -P "$PID_HAPROXY" | tr '\n' ' ')" ;;
	esac
}
port_of() {
	case $1 in
	direct) echo "$P_UP" ;; berth) echo "$P_BERTH" ;; nginx) echo "$P_NGINX" ;; haproxy) echo "$P_HAPROXY" ;;
	esac
}
# ticks PID...: utime+stime (all threads) summed over the processes. The
# command name in field 2 may hold spaces, so fields are counted after ")".
ticks() {
	local p t=0 f
	for p in "$@"; do
		f=$(sed 's/.*) //' "/proc/$p/stat") || die "process $p is gone"
		t=$((t + $(awk '{print $12 + $13}' <<<"$f")))
	done
	echo "$t"
}
# to_us VALUE: wrk's "1.23ms" / "456.00us" / "1.02s" as microseconds.
to_us() {
	awk -v v="$1" 'BEGIN {
		if (v ~ /us$/) { sub(/us$/, "", v); m = 1 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); m = 1000 }
		else if (v ~ /m$/) { sub(/m$/, "", v); m = 60000000 }
		else if (v ~ /s$/) { sub(/s$/, "", v); m = 1000000 }
		else { m = 1 }
		printf "%.0f", v * m }'
}

declare -A RPS P50 P99 CPU UPCPU HP50 HP99
peak() {
	local name=$1 url="http://127.0.0.1:$(port_of "$1")/" pids up0 up1 t0 t1 out reqs
	log "peak: $name — warm-up ${WARMUP}s, then ${DURATION}s with wrk -t1 -c$CONNS"
	timeout $((WARMUP + 30)) wrk -t1 -c"$CONNS" -d"${WARMUP}s" "$url" >/dev/null
	pids=$(pids_of "$name")
	# shellcheck disable=SC2086
	t0=$(ticks $pids); up0=$(ticks "$PID_UP")
	timeout $((DURATION + 30)) wrk --latency -t1 -c"$CONNS" -d"${DURATION}s" "$url" >"$WORK/wrk-$name.txt"
	# shellcheck disable=SC2086
	t1=$(ticks $pids); up1=$(ticks "$PID_UP")
	out="$WORK/wrk-$name.txt"
	cp "$out" "$OUTDIR/wrk-$name.txt"
	grep -qE 'Non-2xx|Socket errors' "$out" && log "warning: $name: $(grep -E 'Non-2xx|Socket errors' "$out" | tr -s ' ')"
	reqs=$(awk '/requests in/ {print $1}' "$out")
	RPS[$name]=$(awk '/^Requests\/sec/ {printf "%.0f", $2}' "$out")
	P50[$name]=$(to_us "$(awk '$1 == "50%" {print $2}' "$out")")
	P99[$name]=$(to_us "$(awk '$1 == "99%" {print $2}' "$out")")
	CPU[$name]=$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="$reqs" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
	UPCPU[$name]=$(awk -v t=$((up1 - up0)) -v hz="$HZ" -v n="$reqs" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
}
half() {
	local name=$1 rate=$2 line
	log "half load: $name — ${rate} req/s for ${HALF_DURATION}s (after 2s warm-up), $CONNS connections"
	line=$(timeout $((HALF_DURATION + 40)) "$WORK/load" -url "http://127.0.0.1:$(port_of "$name")/" \
		-rate "$rate" -duration "${HALF_DURATION}s" -warmup 2s -conns "$CONNS")
	echo "$name $line" >>"$OUTDIR/half-load.txt"
	HP50[$name]=$(sed -n 's/.*p50_us=\([0-9]*\).*/\1/p' <<<"$line")
	HP99[$name]=$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
if awk -v l="${LOAD_START%% *}" 'BEGIN { exit !(l > 1.0) }'; then
	log "warning: load average $LOAD_START before starting: other work shares these CPUs and inflates every figure"
fi
STAMP=$(date +%Y%m%d-%H%M%S)
OUTDIR="$ROOT/bench/out/proxy-$STAMP"
mkdir -p "$OUTDIR"

# ---- 4. peak runs ------------------------------------------------------------
for n in direct berth nginx haproxy; do peak "$n"; done

# ---- 5. half load ------------------------------------------------------------
HALF_RATE=$((RPS[berth] / 2))
: >"$OUTDIR/half-load.txt"
for n in direct berth nginx haproxy; do half "$n" "$HALF_RATE"; done

# ---- 6. report ---------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
ms() { awk -v u="$1" 'BEGIN { printf "%.2f", u / 1000 }'; }
{
	echo "berth data-plane benchmark, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "machine: $(nproc) CPUs, $(uname -r); berth $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet -- internal/proxy 2>/dev/null || echo '+dirty'), GOMAXPROCS=${BERTH_GOMAXPROCS:-default}"
	echo "$(nginx -v 2>&1 | sed 's/.*: //'), haproxy $(haproxy -v | awk 'NR == 1 {print $3}'), $(wrk --version 2>&1 | awk 'NR == 1 {print $1, $2}')"
	echo "load average: $LOAD_START at start, $(cut -d' ' -f1-3 /proc/loadavg) at end (the bench itself adds about 2)"
	echo "upstream: bench/upstream (Go, GOMAXPROCS=1, 100-byte body), the same one for every row"
	echo "peak: wrk --latency -t1 -c$CONNS -d${DURATION}s after a ${WARMUP}s warm-up; CPU = proxy utime+stime / requests"
	echo
	printf '%-8s %9s %9s %9s %13s %13s\n' run "req/s" "p50 ms" "p99 ms" "proxy µs/req" "upstr µs/req"
	for n in direct berth nginx haproxy; do
		cpu=${CPU[$n]}
		[[ $n == direct ]] && cpu="-"
		printf '%-8s %9s %9s %9s %13s %13s\n' "$n" "${RPS[$n]}" "$(ms "${P50[$n]}")" "$(ms "${P99[$n]}")" "$cpu" "${UPCPU[$n]}"
	done
	echo
	echo "berth/nginx:   req/s $(ratio "${RPS[berth]}" "${RPS[nginx]}"), CPU/req $(ratio "${CPU[berth]}" "${CPU[nginx]}")"
	echo "berth/haproxy: req/s $(ratio "${RPS[berth]}" "${RPS[haproxy]}"), CPU/req $(ratio "${CPU[berth]}" "${CPU[haproxy]}")"
	echo
	echo "half load: ${HALF_RATE} req/s constant (half of berth's peak), bench/load, $CONNS connections, ${HALF_DURATION}s; latency from when each request was released (scheduled)"
	printf '%-8s %9s %9s %15s\n' run "p50 ms" "p99 ms" "added p99 ms"
	for n in direct berth nginx haproxy; do
		added="-"
		[[ $n != direct ]] && added=$(ms $((HP99[$n] - HP99[direct])))
		printf '%-8s %9s %9s %15s\n' "$n" "$(ms "${HP50[$n]}")" "$(ms "${HP99[$n]}")" "$added"
	done
	echo
	t_rps=$(awk -v a="${RPS[berth]}" -v b="${RPS[nginx]}" 'BEGIN { print (a >= b) ? "met" : "NOT met" }')
	t_cpu=$(awk -v a="${CPU[berth]}" 'BEGIN { print (a <= 50) ? "met" : "NOT met" }')
	t_lat=$(awk -v a=$((HP99[berth] - HP99[direct])) 'BEGIN { print (a <= 1000) ? "met" : "NOT met" }')
	echo "targets: berth req/s >= nginx: $t_rps; berth CPU <= 50 µs/req: $t_cpu; added p99 at half load <= 1 ms: $t_lat"
} | tee "$OUTDIR/summary.txt"
cp "$OUTDIR/summary.txt" "$ROOT/bench/out/latest.txt"
log "results in $OUTDIR"
