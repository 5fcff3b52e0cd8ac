#!/usr/bin/env bash
# bench/proxy.sh — berth's data plane against nginx and haproxy, in one run,
# for every load shape issue 12 names, with berth/nginx ratios.
#
# What it does, all on 127.0.0.1:
#   1. installs nginx, haproxy and wrk with apt-get when missing (needs root);
#   2. builds berth, bench/upstream (the fixed backend), bench/load (the
#      constant-rate load generator) and bench/wsload (websocket echoes);
#   3. starts ONE upstream (Go, GOMAXPROCS=1; 12-byte body, /1k and /64k
#      bodies, POST bodies read and discarded, /ws a websocket echo) that
#      every run uses, then berth (one static deployment, path prefix /),
#      nginx (1 worker, upstream keepalive, websocket upgrade map) and
#      haproxy (nbthread 1, http-reuse always, timeout tunnel), all pointing
#      at it;
#   4. for each scenario in SCENARIOS, a peak run per target (the upstream
#      directly, then through each proxy): wrk warm-up, then a fixed duration
#      with --latency (wsload for ws); for each it reads the proxy's
#      utime+stime from /proc/<pid>/stat (all of its processes) before and
#      after, and divides by the requests (messages) completed;
#        keepalive  GET / (12 B), wrk -t1 -c$CONNS, keep-alive
#        close      the same with "Connection: close" (a new client
#                   connection per request; the proxies keep the upstream's)
#        1k, 64k    GET /1k, /64k: 1 KiB and 64 KiB bodies
#        post4k     POST / with a 4 KiB body (a wrk lua script)
#        c1000      GET / over $C1000 concurrent connections
#        ws         websocket messages (32 B) echoed, $WS_CONNS connections,
#                   each sending one message and waiting for its echo
#        tls        GET / (12 B) over HTTPS, keep-alive (berth and nginx
#                   only, the same ECDSA P-256 certificate and TLS 1.3
#                   suite, TLS_AES_128_GCM_SHA256 with X25519)
#        tlsnew     the same with "Connection: close": a full TLS
#                   handshake per request (wrk resumes no sessions), so
#                   req/s is new handshakes per second
#   5. keepalive only: half-load runs with bench/load at half of berth's peak
#      rate: the same constant rate straight to the upstream and through each
#      proxy; the added p99 is the proxy's p99 minus the direct p99;
#   6. prints a table per scenario, the berth/nginx ratios of every scenario
#      and the targets, and writes it all to bench/out/.
# Every process it starts is stopped on exit (trap), every run is bounded.
#
# Environment knobs (defaults in brackets):
#   SCENARIOS ["keepalive close 1k 64k post4k c1000 ws tls tlsnew"]  which scenarios, in order
#   TARGETS  ["direct berth nginx haproxy"]  which servers each scenario runs against
#   DURATION [10]  seconds of each measured keepalive run
#   WARMUP   [3]   seconds of warm-up before each keepalive run
#   XDURATION [5]  seconds of each measured run of the other scenarios
#   XWARMUP  [1]   seconds of their warm-up
#   CONNS    [50]  wrk connections (wrk uses one thread)
#   C1000    [1000] connections of the c1000 scenario
#   WS_CONNS [50]  websocket connections of the ws scenario
#   HALF     [1]   0: skip the half-load runs
#   HALF_DURATION [8]  seconds of each half-load run (after 2 s of warm-up)
#   REPEAT   [1]   runs of each scenario and target (round the targets); the
#                  tables give the median of each figure, the req/s range beside it
#   BERTH_GOMAXPROCS [unset: Go's default, one per core]  GOMAXPROCS for berth
#   PORT_BASE [18080]  where to start looking for five consecutive free ports
#   BERTH_BIN [unset: go build ./cmd/berth]  a prebuilt berth binary to use
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

SCENARIOS=${SCENARIOS:-keepalive close 1k 64k post4k c1000 ws tls tlsnew}
TARGETS=${TARGETS:-direct berth nginx haproxy}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-3}
XDURATION=${XDURATION:-5}
XWARMUP=${XWARMUP:-1}
CONNS=${CONNS:-50}
C1000=${C1000:-1000}
WS_CONNS=${WS_CONNS:-50}
HALF=${HALF:-1}
HALF_DURATION=${HALF_DURATION:-8}
REPEAT=${REPEAT:-1}
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive number, not $REPEAT"
for s in $SCENARIOS; do
	case $s in keepalive | close | 1k | 64k | post4k | c1000 | ws | tls | tlsnew) ;; *) die "unknown scenario $s (have: keepalive close 1k 64k post4k c1000 ws tls tlsnew)" ;; esac
done
for t in $TARGETS; do
	case $t in direct | berth | nginx | haproxy) ;; *) die "unknown target $t (have: direct berth nginx haproxy)" ;; esac
done

# ---- 1. tools ----------------------------------------------------------------
need_tools nginx:nginx haproxy:haproxy wrk:wrk curl:curl openssl:openssl
raise_nofile
if [[ " $SCENARIOS " == *" c1000 "* ]] && (($(ulimit -n) < 3 * C1000 + 100)); then
	die "c1000 needs at least $((3 * C1000 + 100)) file descriptors, ulimit -n is $(ulimit -n)"
fi

# ---- 2. build ----------------------------------------------------------------
build_tools upstream load wsload

PORT_BASE=$(pick_ports 7)
P_UP=$PORT_BASE
P_BERTH=$((PORT_BASE + 1))
P_ADMIN=$((PORT_BASE + 2))
P_NGINX=$((PORT_BASE + 3))
P_HAPROXY=$((PORT_BASE + 4))
P_BERTH_TLS=$((PORT_BASE + 5))
P_NGINX_TLS=$((PORT_BASE + 6))
log "ports $P_UP (upstream), $P_BERTH (berth; admin $P_ADMIN; TLS $P_BERTH_TLS), $P_NGINX (nginx; TLS $P_NGINX_TLS), $P_HAPROXY (haproxy)"
# is_tls SCENARIO
is_tls() { [[ $1 == tls || $1 == tlsnew ]]; }
WITH_TLS=0
for s in $SCENARIOS; do is_tls "$s" && WITH_TLS=1; done

# ---- 3. servers --------------------------------------------------------------
start_upstream "$P_UP"
if ((WITH_TLS)); then
	tls_cert
	BERTH_SERVE_ARGS=(--proxy-tls-addr "127.0.0.1:$P_BERTH_TLS" --tls-cert "$WORK/tls.crt" --tls-key "$WORK/tls.key")
	export NGINX_TLS_PORT=$P_NGINX_TLS
fi
start_berth "$P_BERTH" "$P_ADMIN"
start_nginx "$P_NGINX" "$P_UP"

cat >"$WORK/haproxy.cfg" <<EOF
global
	nbthread 1
	maxconn 8192
defaults
	mode http
	maxconn 8192
	timeout connect 5s
	timeout client 30s
	timeout server 30s
	timeout tunnel 60s
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
register_bench "$P_ADMIN" "$P_UP"
for p in $P_UP $P_BERTH $P_NGINX $P_HAPROXY; do
	# Every path answers 200 with the upstream's body before anything is measured.
	for want in /:12 /1k:1024 /64k:65536; do
		body=$(curl -sf --max-time 5 "http://127.0.0.1:$p${want%%:*}" | wc -c) || die "GET ${want%%:*} through port $p failed"
		[[ $body == "${want#*:}" ]] || die "GET ${want%%:*} through port $p answered $body bytes, want ${want#*:}"
	done
	body=$(head -c 4096 /dev/zero | curl -sf --max-time 5 --data-binary @- "http://127.0.0.1:$p/" | wc -c) || die "POST through port $p failed"
	[[ $body == 12 ]] || die "POST through port $p answered $body bytes"
done
if ((WITH_TLS)); then
	for p in $P_BERTH_TLS $P_NGINX_TLS; do
		wait_port "$p"
		proto=$(curl -sf --http1.1 --max-time 5 --cacert "$WORK/tls.crt" -o /dev/null -w '%{http_version} %{size_download}' "https://127.0.0.1:$p/") || die "GET https://127.0.0.1:$p/ failed"
		[[ $proto == "1.1 12" ]] || die "GET https://127.0.0.1:$p/ answered HTTP/${proto% *} with ${proto#* } bytes, want HTTP/1.1 with 12"
	done
fi
cat >"$WORK/post4k.lua" <<'EOF'
wrk.method = "POST"
wrk.body = string.rep("x", 4096)
wrk.headers["Content-Type"] = "application/octet-stream"
EOF

# ---- measuring helpers -------------------------------------------------------
# pids_of NAME: every process of a server (nginx: master and workers).
pids_of() {
	case $1 in
	direct) echo "$PID_UP" ;;
	berth) echo "$PID_BERTH" ;;
	nginx) nginx_pids ;;
	haproxy) echo "$PID_HAPROXY $(pgrep -P "$PID_HAPROXY" | tr '\n' ' ')" ;;
	esac
}
port_of() {
	case $1 in
	direct) echo "$P_UP" ;; berth) echo "$P_BERTH" ;; nginx) echo "$P_NGINX" ;; haproxy) echo "$P_HAPROXY" ;;
	esac
}
tls_port_of() {
	case $1 in berth) echo "$P_BERTH_TLS" ;; nginx) echo "$P_NGINX_TLS" ;; esac
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
per_req() { awk -v t="$1" -v hz="$HZ" -v n="$2" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "-" }'; }

# scenario NAME: sets what a scenario sends — S_DESC, S_PATH, S_CONNS,
# S_DUR, S_WARM and the extra wrk arguments S_ARGS.
scenario() {
	S_PATH=/ S_CONNS=$CONNS S_DUR=$XDURATION S_WARM=$XWARMUP S_ARGS=()
	case $1 in
	keepalive) S_DUR=$DURATION S_WARM=$WARMUP S_DESC="GET / (12 B), keep-alive" ;;
	close) S_ARGS=(-H 'Connection: close') S_DESC="GET / (12 B), Connection: close (a client connection per request)" ;;
	1k) S_PATH=/1k S_DESC="GET /1k (1,024 B body), keep-alive" ;;
	64k) S_PATH=/64k S_DESC="GET /64k (65,536 B body), keep-alive" ;;
	post4k) S_ARGS=(-s "$WORK/post4k.lua") S_DESC="POST / with a 4,096 B body, 12 B answer, keep-alive" ;;
	c1000) S_CONNS=$C1000 S_DESC="GET / (12 B), $C1000 connections, keep-alive" ;;
	ws) S_PATH=/ws S_CONNS=$WS_CONNS S_DESC="websocket: 32 B binary messages echoed, one in flight per connection" ;;
	tls) S_DUR=$DURATION S_WARM=$WARMUP S_DESC="GET / (12 B) over HTTPS (ECDSA P-256, TLS 1.3 AES-128-GCM, X25519), keep-alive" ;;
	tlsnew) S_ARGS=(-H 'Connection: close') S_DESC="GET / (12 B) over HTTPS, Connection: close: a full TLS handshake per request" ;;
	esac
}

# Results, keyed "scenario:target#run"; the medians over the runs, keyed
# "scenario:target".
declare -A RPS P50 P99 CPU UPCPU ERRS HP50 HP99 HERR RANGE
# median_of ARRAY KEY: ARRAY[KEY] = the median of ARRAY[KEY#1..REPEAT]
# (runs without a figure are left out).
median_of() {
	local -n med=$1
	local r v vals=()
	for r in $(seq "$REPEAT"); do
		v=${med[$2#$r]:-}
		[[ $v =~ ^[0-9.]+$ ]] && vals+=("$v")
	done
	if ((${#vals[@]})); then
		med[$2]=$(printf '%s\n' "${vals[@]}" | sort -g | awk '{v[NR] = $1} END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
	else
		med[$2]=${med[$2#1]:-}
	fi
}
# range_of ARRAY KEY: "min-max" of the runs.
range_of() {
	local -n rng=$1
	local r
	for r in $(seq "$REPEAT"); do echo "${rng[$2#$r]:-}"; done | grep -E '^[0-9.]+$' | sort -g | sed -n '1p;$p' | paste -sd- || true
}
# sum_errors KEY: ERRS[KEY] = the errors of all runs ("failed" if one failed).
sum_errors() {
	local r v t=0
	for r in $(seq "$REPEAT"); do
		v=${ERRS[$1#$r]:-}
		if [[ $v =~ ^[0-9]+$ ]]; then t=$((t + v)); elif [[ -n $v ]]; then t=failed; break; fi
	done
	ERRS[$1]=$t
}
peak() {
	local sc=$1 name=$2 key="$1:$2#$3" url pids up0 up1 t0 t1 out reqs
	scenario "$sc"
	url="http://127.0.0.1:$(port_of "$name")$S_PATH"
	if is_tls "$sc"; then
		[[ $name == berth || $name == nginx ]] || return 0
		url="https://127.0.0.1:$(tls_port_of "$name")$S_PATH"
	fi
	out="$OUTDIR/wrk-$sc-$name-$3.txt"
	log "$sc: $name (run $3 of $REPEAT) — warm-up ${S_WARM}s, then ${S_DUR}s with wrk -t1 -c$S_CONNS"
	timeout $((S_WARM + 30)) wrk -t1 -c"$S_CONNS" -d"${S_WARM}s" "${S_ARGS[@]}" "$url" >/dev/null
	pids=$(pids_of "$name")
	# shellcheck disable=SC2086
	t0=$(ticks $pids); up0=$(ticks "$PID_UP")
	timeout $((S_DUR + 30)) wrk --latency -t1 -c"$S_CONNS" -d"${S_DUR}s" "${S_ARGS[@]}" "$url" >"$out" ||
		log "warning: $sc: $name: wrk exited $?"
	# shellcheck disable=SC2086
	t1=$(ticks $pids); up1=$(ticks "$PID_UP")
	reqs=$(awk '/requests in/ {print $1}' "$out")
	ERRS[$key]=$(awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' "$out")
	((ERRS[$key] == 0)) || log "warning: $sc: $name: $(grep -E 'Non-2xx|Socket errors' "$out" | tr -s ' ' | tr '\n' ' ')"
	RPS[$key]=$(awk '/^Requests\/sec/ {printf "%.0f", $2}' "$out")
	P50[$key]=$(to_us "$(awk '$1 == "50%" {print $2}' "$out")")
	P99[$key]=$(to_us "$(awk '$1 == "99%" {print $2}' "$out")")
	CPU[$key]=$(per_req $((t1 - t0)) "${reqs:-0}")
	UPCPU[$key]=$(per_req $((up1 - up0)) "${reqs:-0}")
}
peak_ws() {
	local name=$1 key="ws:$1#$2" url pids up0 up1 t0 t1 out line n
	scenario ws
	url="ws://127.0.0.1:$(port_of "$name")$S_PATH"
	out="$OUTDIR/wsload-$name-$2.txt"
	log "ws: $name (run $2 of $REPEAT) — warm-up ${S_WARM}s, then ${S_DUR}s with wsload -conns $S_CONNS"
	timeout $((S_WARM + 40)) "$WORK/wsload" -url "$url" -conns "$S_CONNS" -duration "${S_WARM}s" >/dev/null 2>"$WORK/wsload-warm.err" ||
		log "warning: ws: $name: warm-up failed: $(tail -1 "$WORK/wsload-warm.err")"
	pids=$(pids_of "$name")
	# shellcheck disable=SC2086
	t0=$(ticks $pids); up0=$(ticks "$PID_UP")
	timeout $((S_DUR + 40)) "$WORK/wsload" -url "$url" -conns "$S_CONNS" -duration "${S_DUR}s" >"$out" 2>"$out.err" ||
		log "warning: ws: $name: wsload failed: $(tail -2 "$out.err" | tr '\n' ' ')"
	# shellcheck disable=SC2086
	t1=$(ticks $pids); up1=$(ticks "$PID_UP")
	line=$(cat "$out")
	n=$(sed -n 's/.* msgs=\([0-9]*\).*/\1/p' <<<"$line")
	ERRS[$key]=$(sed -n 's/.* errors=\([0-9]*\).*/\1/p' <<<"$line")
	[[ -n $n ]] || { ERRS[$key]=failed; n=0; }
	RPS[$key]=$(sed -n 's/.* msgs_per_s=\([0-9]*\).*/\1/p' <<<"$line")
	P50[$key]=$(sed -n 's/.* p50_us=\([0-9]*\).*/\1/p' <<<"$line")
	P99[$key]=$(sed -n 's/.* p99_us=\([0-9]*\).*/\1/p' <<<"$line")
	CPU[$key]=$(per_req $((t1 - t0)) "$n")
	UPCPU[$key]=$(per_req $((up1 - up0)) "$n")
}
half() {
	local name=$1 rate=$2 line
	log "half load: $name — ${rate} req/s for ${HALF_DURATION}s (after 2s warm-up), $CONNS connections"
	line=$(timeout $((HALF_DURATION + 40)) "$WORK/load" -url "http://127.0.0.1:$(port_of "$name")/" \
		-rate "$rate" -duration "${HALF_DURATION}s" -warmup 2s -conns "$CONNS" 2>"$WORK/load.err") || true
	[[ -s $WORK/load.err ]] && log "warning: half load: $name: $(tail -1 "$WORK/load.err")"
	echo "$name $line" >>"$OUTDIR/half-load.txt"
	HP50[$name]=$(sed -n 's/.*p50_us=\([0-9]*\).*/\1/p' <<<"$line")
	HP99[$name]=$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")
	HERR[$name]=$(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<<"$line")
}

LOAD_START=$(loadavg)
warn_load
STAMP=$(date +%Y%m%d-%H%M%S)
OUTDIR="$ROOT/bench/out/proxy-$STAMP"
mkdir -p "$OUTDIR"

# ---- 4. peak runs ------------------------------------------------------------
declare -A LOAD_AT
for sc in $SCENARIOS; do
	LOAD_AT[$sc]=$(loadavg)
	# Repeats go round the targets, so that a change in the machine's load
	# spreads over all of them rather than landing on one.
	for r in $(seq "$REPEAT"); do
		for n in $TARGETS; do
			if [[ $sc == ws ]]; then peak_ws "$n" "$r"; else peak "$sc" "$n" "$r"; fi
		done
	done
	for n in $TARGETS; do
		for m in RPS P50 P99 CPU UPCPU; do median_of "$m" "$sc:$n"; done
		sum_errors "$sc:$n"
		RANGE[$sc:$n]=$(range_of RPS "$sc:$n")
	done
done

# ---- 5. half load ------------------------------------------------------------
HALF_RATE=0
if ((HALF)) && [[ " $SCENARIOS " == *" keepalive "* && " $TARGETS " == *" direct "* && " $TARGETS " == *" berth "* ]]; then
	HALF_RATE=$((${RPS[keepalive:berth]:-0} / 2))
	: >"$OUTDIR/half-load.txt"
	((HALF_RATE > 0)) && for n in $TARGETS; do half "$n" "$HALF_RATE"; done
fi

# ---- 6. report ---------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && a != "-" && b > 0) printf "%.2f", a / b; else print "-" }'; }
ms() { awk -v u="$1" 'BEGIN { if (u == "") print "-"; else printf "%.2f", u / 1000 }'; }
# verdict OK: "met" or "NOT met" (or "-" when a figure is missing).
verdict() { awk -v e="$1" 'BEGIN { if (e == "") print "-"; else print (e + 0) ? "met" : "NOT met" }'; }
cmp_le() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || a == "-" || b == "" || b == "-") print ""; else print (a <= b) }'; }
has() { [[ -n ${RPS[$1]:-} ]]; }
{
	echo "berth data-plane benchmark, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "machine: $(nproc) CPUs, $(uname -r); berth $(berth_rev), GOMAXPROCS=${BERTH_GOMAXPROCS:-default}"
	echo "$(nginx -v 2>&1 | sed 's/.*: //') (1 worker), haproxy $(haproxy -v | awk 'NR == 1 {print $3}') (nbthread 1), $(wrk --version 2>&1 | awk 'NR == 1 {print $1, $2}')"
	echo "load average: $LOAD_START at start, $(loadavg) at end (the bench itself adds about 2)"
	echo "upstream: bench/upstream (Go, GOMAXPROCS=1), the same one for every row"
	echo "each run: wrk --latency -t1 (wsload for ws) after a warm-up; CPU = the proxy's utime+stime / requests (messages)"
	for sc in $SCENARIOS; do
		scenario "$sc"
		echo
		echo "== $sc: $S_DESC; ${S_DUR}s after ${S_WARM}s warm-up, $S_CONNS connections; load ${LOAD_AT[$sc]}$( ((REPEAT > 1)) && echo "; median of $REPEAT runs")"
		printf '%-8s %9s %9s %9s %13s %13s %8s' run "$([[ $sc == ws ]] && echo msg/s || echo req/s)" "p50 ms" "p99 ms" "proxy µs/req" "upstr µs/req" errors
		((REPEAT > 1)) && printf ' %13s' "req/s range"
		echo
		for n in $TARGETS; do
			k="$sc:$n"
			cpu=${CPU[$k]:--}
			[[ $n == direct ]] && cpu="-"
			printf '%-8s %9s %9s %9s %13s %13s %8s' "$n" "${RPS[$k]:--}" "$(ms "${P50[$k]:-}")" "$(ms "${P99[$k]:-}")" "$cpu" "${UPCPU[$k]:--}" "${ERRS[$k]:--}"
			((REPEAT > 1)) && printf ' %13s' "${RANGE[$k]:--}"
			echo
		done
	done
	if [[ " $TARGETS " == *" berth "* && " $TARGETS " == *" nginx "* ]]; then
		echo
		echo "berth/nginx (req/s: higher is better; CPU/req and p99: lower is better)"
		printf '%-10s %8s %8s %8s   %s\n' scenario "req/s" "CPU/req" "p99" "berth/haproxy req/s, CPU/req"
		for sc in $SCENARIOS; do
			b="$sc:berth" g="$sc:nginx" h="$sc:haproxy"
			printf '%-10s %8s %8s %8s   %s, %s\n' "$sc" "$(ratio "${RPS[$b]:-}" "${RPS[$g]:-}")" "$(ratio "${CPU[$b]:-}" "${CPU[$g]:-}")" \
				"$(ratio "${P99[$b]:-}" "${P99[$g]:-}")" "$(ratio "${RPS[$b]:-}" "${RPS[$h]:-}")" "$(ratio "${CPU[$b]:-}" "${CPU[$h]:-}")"
		done
	fi
	if ((HALF_RATE > 0)); then
		echo
		echo "half load: ${HALF_RATE} req/s constant (half of berth's keepalive peak), bench/load, $CONNS connections, ${HALF_DURATION}s; latency from when each request was released (scheduled)"
		printf '%-8s %9s %9s %15s %8s\n' run "p50 ms" "p99 ms" "added p99 ms" errors
		for n in $TARGETS; do
			added="-"
			[[ $n != direct ]] && added=$(ms $((HP99[$n] - HP99[direct])))
			printf '%-8s %9s %9s %15s %8s\n' "$n" "$(ms "${HP50[$n]}")" "$(ms "${HP99[$n]}")" "$added" "${HERR[$n]:--}"
		done
	fi
	if has keepalive:berth && has keepalive:nginx; then
		b=keepalive:berth g=keepalive:nginx
		echo
		t_cpu=$(verdict "$(cmp_le "${CPU[$b]}" "${CPU[$g]}")")
		t_rps=$(verdict "$(cmp_le "${RPS[$g]}" "${RPS[$b]}")")
		t_p99=$(verdict "$(cmp_le "${P99[$b]}" "${P99[$g]}")")
		line="targets (keepalive): berth CPU/req <= 1.0x nginx: $t_cpu ($(ratio "${CPU[$b]}" "${CPU[$g]}")x);"
		line+=" req/s >= 1.0x nginx: $t_rps ($(ratio "${RPS[$b]}" "${RPS[$g]}")x); p99 <= nginx's: $t_p99 ($(ms "${P99[$b]}") vs $(ms "${P99[$g]}") ms)"
		if ((HALF_RATE > 0)); then
			line+="; added p99 at half load <= 1 ms: $(verdict "$(cmp_le $((HP99[berth] - HP99[direct])) 1000)")"
		fi
		echo "$line"
		met=0 all=0
		for sc in $SCENARIOS; do
			{ has "$sc:berth" && has "$sc:nginx"; } || continue
			all=$((all + 1))
			[[ $(cmp_le "${CPU[$sc:berth]}" "${CPU[$sc:nginx]}")$(cmp_le "${RPS[$sc:nginx]}" "${RPS[$sc:berth]}") == 11 ]] && met=$((met + 1))
		done
		echo "all scenarios: berth CPU/req <= nginx and req/s >= nginx in $met of $all"
	fi
	if has tls:berth && has tls:nginx; then
		b=tls:berth g=tls:nginx
		line="targets (HTTPS): keep-alive req/s >= 1.0x nginx: $(verdict "$(cmp_le "${RPS[$g]}" "${RPS[$b]}")") ($(ratio "${RPS[$b]}" "${RPS[$g]}")x);"
		line+=" CPU/req <= 1.2x nginx: $(verdict "$(awk -v a="${CPU[$b]}" -v b="${CPU[$g]}" 'BEGIN { print (a <= 1.2 * b) }')") ($(ratio "${CPU[$b]}" "${CPU[$g]}")x)"
		if has tlsnew:berth && has tlsnew:nginx; then
			line+="; new handshakes/s >= 0.9x nginx: $(verdict "$(awk -v a="${RPS[tlsnew:berth]}" -v b="${RPS[tlsnew:nginx]}" 'BEGIN { print (a >= 0.9 * b) }')") ($(ratio "${RPS[tlsnew:berth]}" "${RPS[tlsnew:nginx]}")x)"
		fi
		echo "$line"
	fi
} | tee "$OUTDIR/summary.txt"
cp "$OUTDIR/summary.txt" "$ROOT/bench/out/latest.txt"
log "results in $OUTDIR"
