#!/usr/bin/env bash
# bench/memory.sh — berth's memory: idle, with 10,000 static deployments, and
# per idle keep-alive connection, beside nginx's per-connection memory.
#
# What it does, all on 127.0.0.1:
#   1. installs nginx when missing; builds berth, bench/upstream,
#      bench/register (creates deployments through the admin API, several
#      keep-alive connections at once) and bench/idleconns (opens N
#      connections, one GET each, and holds them idle);
#   2. berth A (fresh data dir, no host setup): VmRSS once it answers and has
#      settled (SETTLE s); then DEPLOYMENTS static deployments registered
#      (a host route each, all forwarding to the upstream) — how long that
#      takes — and VmRSS after them; then berth's CPU at rest with them over
#      REST seconds (their health probes run every 2 s);
#   3. berth B (fresh again, one catch-all deployment): a warm-up GET, VmRSS,
#      CONNS idle keep-alive connections through berth's proxy, VmRSS while
#      they are held; (after - before) / CONNS is berth's memory per idle
#      connection;
#   4. the same CONNS connections against nginx (1 worker, upstream
#      keep-alive, the config of bench/proxy.sh), RSS summed over master and
#      worker;
#   5. prints the figures and the ratio to nginx (issue 12's target: berth
#      per connection <= 2x nginx's), and writes them to bench/out/.
# Go's live heap is read from GODEBUG=gctrace=1 (the last collection before
# the reading), when a collection ran. Every process it starts is stopped on
# exit (trap); every wait is bounded.
#
# Environment knobs (defaults in brackets):
#   DEPLOYMENTS [10000]  static deployments to register
#   REG_CONNS [8]        concurrent registration requests
#   CONNS [1000]         idle keep-alive connections
#   SETTLE [2]           seconds to wait before each RSS reading
#   CONN_SETTLE [5]      seconds to wait before reading RSS with the idle connections held
#   REST [5]             seconds over which berth's CPU at rest is measured
#   PORT_BASE [18180]    where to start looking for four consecutive free ports
#   BERTH_BIN [unset: go build ./cmd/berth]  a prebuilt berth binary to use
#   GOGC [unset: berth serve's own 400]  passed to berth (its RSS follows the
#                  heap goal, up to (1 + GOGC/100) x the live heap)
set -euo pipefail
cd "$(dirname "$0")/.."
PORT_BASE=${PORT_BASE:-18180}
# shellcheck source=bench/lib.sh
. bench/lib.sh

DEPLOYMENTS=${DEPLOYMENTS:-10000}
REG_CONNS=${REG_CONNS:-8}
CONNS=${CONNS:-1000}
SETTLE=${SETTLE:-2}
CONN_SETTLE=${CONN_SETTLE:-5}
REST=${REST:-5}

need_tools nginx:nginx curl:curl
raise_nofile
(($(ulimit -n) > 2 * CONNS + 100)) || die "$CONNS connections need more file descriptors than ulimit -n $(ulimit -n)"
build_tools upstream register idleconns

PORT_BASE=$(pick_ports 4)
P_UP=$PORT_BASE P_BERTH=$((PORT_BASE + 1)) P_ADMIN=$((PORT_BASE + 2)) P_NGINX=$((PORT_BASE + 3))
log "ports $P_UP (upstream), $P_BERTH (berth; admin $P_ADMIN), $P_NGINX (nginx)"
LOAD_START=$(loadavg)
warn_load
OUTDIR="$ROOT/bench/out/memory-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUTDIR"

start_upstream "$P_UP"
wait_port "$P_UP"

# heap_mb: the live heap after berth's last collection, from gctrace ("-" if none yet).
heap_mb() {
	local v
	v=$(grep -E '^gc [0-9]+ @' "$WORK/berth.log" | tail -1 | sed -n 's/.* \([0-9]*\)->\([0-9]*\)->\([0-9]*\) MB.*/\3/p')
	echo "${v:--}"
}
rss_line() { awk '$1 ~ /^(VmRSS|RssAnon|RssFile):$/ {printf "%s %s ", $1, $2}' "/proc/$1/status"; }
fresh_berth() {
	rm -rf "$WORK/berth-data"
	GODEBUG=gctrace=1 start_berth "$P_BERTH" "$P_ADMIN"
	wait_port "$P_BERTH"
	wait_port "$P_ADMIN"
	curl -sf --max-time 5 "http://127.0.0.1:$P_ADMIN/healthz" >/dev/null || die "berth's /healthz does not answer"
}
# hold_conns PORT NAME: CONNS idle connections to PORT until stop_conns.
hold_conns() {
	"$WORK/idleconns" -addr "127.0.0.1:$1" -n "$CONNS" -hold 120s >"$WORK/idle-$2.out" 2>"$WORK/idle-$2.err" &
	PID_IDLE=$!
	PIDS+=("$PID_IDLE")
	for _ in $(seq 600); do
		grep -q '^ready' "$WORK/idle-$2.out" && return 0
		kill -0 "$PID_IDLE" 2>/dev/null || die "idleconns against $2 failed: $(cat "$WORK/idle-$2.err")"
		sleep 0.1
	done
	die "idleconns against $2 did not open $CONNS connections in 60 s"
}
# stop_conns NAME: closes them; warns if the server had dropped any.
stop_conns() {
	kill -TERM "$PID_IDLE" 2>/dev/null || true
	if ! wait "$PID_IDLE"; then
		log "warning: $1: $(cat "$WORK/idle-$1.err")"
		IDLE_ERR[$1]=$(cat "$WORK/idle-$1.err")
	fi
	stop "$PID_IDLE"
}
declare -A IDLE_ERR=()

# ---- 2. berth A: idle, then DEPLOYMENTS static deployments -------------------
log "berth: idle"
fresh_berth
sleep "$SETTLE"
RSS_IDLE=$(rss_kib "$PID_BERTH")
echo "idle: $(rss_line "$PID_BERTH")" >>"$OUTDIR/rss.txt"
log "berth: registering $DEPLOYMENTS static deployments, $REG_CONNS at a time"
REG=$(timeout 900 "$WORK/register" -admin "http://127.0.0.1:$P_ADMIN" -upstream "127.0.0.1:$P_UP" \
	-n "$DEPLOYMENTS" -conns "$REG_CONNS" 2>"$OUTDIR/register.txt") ||
	die "registering the deployments failed: $(tail -1 "$OUTDIR/register.txt")"
REG_SECS=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$REG")
REG_RATE=$(sed -n "s/.* per_s=\([0-9]*\).*/\1/p" <<<"$REG")
REG_FIRST=$(sed -n "s/.*first_per_s=\([0-9]*\).*/\1/p" <<<"$REG")
REG_LAST=$(sed -n "s/.*last_per_s=\([0-9]*\).*/\1/p" <<<"$REG")
got=$(curl -sf --max-time 30 "http://127.0.0.1:$P_ADMIN/deployments" | grep -o '"id":"mem-' | wc -l) || got="?"
[[ $got == "$DEPLOYMENTS" ]] || log "warning: GET /deployments lists $got of the $DEPLOYMENTS deployments"
# One of them routes: its host answers through the proxy.
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "Host: mem-$(printf %05d "$DEPLOYMENTS").bench.test" "http://127.0.0.1:$P_BERTH/")
[[ $code == 200 ]] || log "warning: GET through the last registered deployment answered $code"
sleep "$SETTLE"
RSS_DEPS=$(rss_kib "$PID_BERTH")
HEAP_DEPS=$(heap_mb)
echo "$DEPLOYMENTS deployments: $(rss_line "$PID_BERTH")heap_mb=$HEAP_DEPS" >>"$OUTDIR/rss.txt"
t0=$(ticks "$PID_BERTH") u0=$(ticks "$PID_UP")
sleep "$REST"
t1=$(ticks "$PID_BERTH") u1=$(ticks "$PID_UP")
REST_CPU=$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v s="$REST" 'BEGIN { printf "%.1f", t / hz / s * 100 }')
REST_UPCPU=$(awk -v t=$((u1 - u0)) -v hz="$HZ" -v s="$REST" 'BEGIN { printf "%.1f", t / hz / s * 100 }')
cp "$WORK/berth.log" "$OUTDIR/berth-A.log"
stop "$PID_BERTH"

# ---- 3. berth B: CONNS idle keep-alive connections ---------------------------
log "berth: $CONNS idle keep-alive connections"
fresh_berth
register_bench "$P_ADMIN" "$P_UP"
curl -sf --max-time 5 "http://127.0.0.1:$P_BERTH/" >/dev/null || die "GET through berth failed"
sleep "$SETTLE"
B0=$(rss_kib "$PID_BERTH")
echo "berth before $CONNS connections: $(rss_line "$PID_BERTH")" >>"$OUTDIR/rss.txt"
hold_conns "$P_BERTH" berth
# berth parks a connection idle for 1 s (its goroutine and buffers go) and
# hands the memory back to the OS 2 s after the first parking.
sleep "$CONN_SETTLE"
B1=$(rss_kib "$PID_BERTH")
HEAP_CONNS=$(heap_mb)
echo "berth with $CONNS connections: $(rss_line "$PID_BERTH")heap_mb=$HEAP_CONNS" >>"$OUTDIR/rss.txt"
stop_conns berth
cp "$WORK/berth.log" "$OUTDIR/berth-B.log"
stop "$PID_BERTH"

# ---- 4. nginx: the same connections ------------------------------------------
log "nginx: $CONNS idle keep-alive connections"
start_nginx "$P_NGINX" "$P_UP"
wait_port "$P_NGINX"
curl -sf --max-time 5 "http://127.0.0.1:$P_NGINX/" >/dev/null || die "GET through nginx failed"
sleep "$SETTLE"
# shellcheck disable=SC2046
N0=$(rss_kib $(nginx_pids))
hold_conns "$P_NGINX" nginx
sleep "$SETTLE"
# shellcheck disable=SC2046
N1=$(rss_kib $(nginx_pids))
echo "nginx master+worker: before $N0 KiB, with $CONNS connections $N1 KiB" >>"$OUTDIR/rss.txt"
stop_conns nginx

# ---- 5. report ---------------------------------------------------------------
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
per() { awk -v a="$1" -v b="$2" -v n="$CONNS" 'BEGIN { printf "%.2f", (b - a) / n }'; }
BPER=$(per "$B0" "$B1")
NPER=$(per "$N0" "$N1")
RATIO=$(awk -v a="$BPER" -v b="$NPER" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
MET=$(awk -v a="$BPER" -v b="$NPER" 'BEGIN { print (a <= 2 * b) ? "met" : "NOT met" }')
{
	echo "berth memory benchmark, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "machine: $(nproc) CPUs, $(uname -r); berth $(berth_rev); $(nginx -v 2>&1 | sed 's/.*: //') (1 worker)"
	echo "load average: $LOAD_START at start, $(loadavg) at end; RSS is /proc/PID/status VmRSS, read ${SETTLE}s after each step"
	echo
	printf '%-52s %12s\n' "berth idle (after start, no deployments)" "$(mib "$RSS_IDLE") MiB"
	printf '%-52s %12s\n' "berth with $DEPLOYMENTS static deployments" "$(mib "$RSS_DEPS") MiB"
	printf '%-52s %12s\n' "  per deployment" "$(awk -v a="$RSS_IDLE" -v b="$RSS_DEPS" -v n="$DEPLOYMENTS" 'BEGIN { printf "%.2f KiB", (b - a) / n }')"
	printf '%-52s %12s\n' "  Go live heap at the last GC (berth: GOGC=${GOGC:-400})" "$HEAP_DEPS MB"
	printf '%-52s %12s\n' "    live heap per deployment" "$(awk -v h="$HEAP_DEPS" -v n="$DEPLOYMENTS" 'BEGIN { if (h == "-") print "-"; else printf "%.1f KiB", h * 1024 / n }')"
	printf '%-52s %12s\n' "  registration ($REG_CONNS concurrent POST /deployments)" "${REG_SECS}s, ${REG_RATE}/s"
	printf '%-52s %12s\n' "    the first and the last 1,000" "${REG_FIRST}/s, ${REG_LAST}/s"
	printf '%-52s %12s\n' "  berth CPU at rest with them (probes every 2 s)" "$REST_CPU% of a core"
	printf '%-52s %12s\n' "  upstream CPU meanwhile (answering the probes)" "$REST_UPCPU% of a core"
	echo
	printf '%-40s %10s %10s %12s\n' "$CONNS idle keep-alive connections" "before" "with them" "per conn"
	printf '%-40s %10s %10s %12s\n' "berth (1 deployment)" "$(mib "$B0") MiB" "$(mib "$B1") MiB" "$BPER KiB"
	printf '%-40s %10s %10s %12s\n' "nginx (master + 1 worker)" "$(mib "$N0") MiB" "$(mib "$N1") MiB" "$NPER KiB"
	for k in "${!IDLE_ERR[@]}"; do echo "warning: $k: ${IDLE_ERR[$k]}"; done
	echo
	echo "berth/nginx per connection: ${RATIO}x; target (berth <= 2x nginx): $MET"
} | tee "$OUTDIR/summary.txt"
log "results in $OUTDIR"
