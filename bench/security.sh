#!/usr/bin/env bash
# bench/security.sh — what the guard and the SIEM cost a request (issue 15:
# with 256 guard rules and the SIEM on, proxy CPU per request rises by at
# most 3 µs over both off, in one run; a blocked request costs at most
# 10 µs of CPU).
#
# What it does, all on 127.0.0.1, REPEAT times, alternating:
#   1. installs wrk when missing; builds berth and bench/upstream;
#   2. "off": berth serve --siem=false with no guard rules, one catch-all
#      deployment to the upstream; wrk -t1 -cCONNS keep-alive GET / for
#      DURATION s after WARMUP s; berth's CPU (utime+stime from /proc) over
#      the requests wrk counted;
#   3. "on": a fresh berth with the SIEM on (the default) and 256 guard rules
#      (half one client address each, a quarter IPv6 CIDRs, a quarter a path
#      prefix with a user-agent substring — none matching wrk), the same run;
#   4. "blocked": on that berth, GET /blocked/, which a 257th-ish rule (path
#      prefix /blocked/) answers 403 before any routing work;
#   5. prints the medians, each run's on − off, their median (the figure)
#      and the targets.
# Environment: REPEAT [3], DURATION [8], WARMUP [2], CONNS [50],
# PORT_BASE [18280], BERTH_BIN (a prebuilt berth).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT_BASE=${PORT_BASE:-18280}
# shellcheck source=bench/lib.sh
. bench/lib.sh

REPEAT=${REPEAT:-3}
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-2}
CONNS=${CONNS:-50}

need_tools wrk:wrk curl:curl
raise_nofile
build_tools upstream
PORT_BASE=$(pick_ports 3)
P_UP=$PORT_BASE P_BERTH=$((PORT_BASE + 1)) P_ADMIN=$((PORT_BASE + 2))
log "ports $P_UP (upstream), $P_BERTH (berth; admin $P_ADMIN)"
LOAD_START=$(loadavg)
warn_load
start_upstream "$P_UP"
wait_port "$P_UP"

post() {
	curl -sf --max-time 10 -X POST -H 'Content-Type: application/json' "http://127.0.0.1:$P_ADMIN$1" -d "$2" >/dev/null ||
		die "POST $1 $2 failed (see $WORK/berth.log)"
}
rules() {
	local i m
	for i in $(seq 0 254); do
		case $((i % 4)) in
		0 | 1) m="{\"client\": \"198.51.$((i / 200)).$((i % 200))\"}" ;;
		2) m="{\"client\": \"2001:db8:$(printf %x "$i")::/48\"}" ;;
		3) m="{\"path_prefix\": \"/wp-admin/$i\", \"user_agent_contains\": \"sqlmap\"}" ;;
		esac
		post /security/rules "{\"action\": \"block\", \"match\": $m}"
	done
	post /security/rules '{"action": "block", "match": {"path_prefix": "/blocked/"}}'
}

declare -A RPS CPU P99
# run MODE PATH N: one measured wrk run against berth; CPU µs per request.
run() {
	local mode=$1 path=$2 n=$3 out t0 t1 reqs
	out="$WORK/wrk-$mode-$n.txt"
	timeout $((WARMUP + 30)) wrk -t1 -c"$CONNS" -d"${WARMUP}s" "http://127.0.0.1:$P_BERTH$path" >/dev/null
	t0=$(ticks "$PID_BERTH")
	timeout $((DURATION + 30)) wrk --latency -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$P_BERTH$path" >"$out"
	t1=$(ticks "$PID_BERTH")
	reqs=$(awk '/requests in/ {print $1}' "$out")
	RPS[$mode#$n]=$(awk '/^Requests\/sec/ {printf "%.0f", $2}' "$out")
	P99[$mode#$n]=$(awk '$1 == "99%" {print $2}' "$out")
	CPU[$mode#$n]=$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="${reqs:-0}" 'BEGIN { if (n > 0) printf "%.2f", t / hz * 1e6 / n; else print "-" }')
	log "$mode (run $n): ${RPS[$mode#$n]} req/s, ${CPU[$mode#$n]} µs CPU per request, p99 ${P99[$mode#$n]}"
}
fresh() {
	start_berth "$P_BERTH" "$P_ADMIN"
	wait_port "$P_BERTH"
	wait_port "$P_ADMIN"
	register_bench "$P_ADMIN" "$P_UP"
}

for n in $(seq "$REPEAT"); do
	BERTH_SERVE_ARGS=(--siem=false)
	fresh
	run off / "$n"
	stop "$PID_BERTH"
	BERTH_SERVE_ARGS=()
	fresh
	rules
	run on / "$n"
	run blocked /blocked/ "$n"
	stop "$PID_BERTH"
done

median() {
	local -n a=$1
	local m=$2 r
	for r in $(seq "$REPEAT"); do echo "${a[$m#$r]}"; done | sort -g | awk '{v[NR] = $1} END { print v[int((NR + 1) / 2)] }'
}
off=$(median CPU off) on=$(median CPU on) blocked=$(median CPU blocked)
# The overhead is the median of each run's on − off (the two ran back to
# back): steadier on a machine whose speed drifts than a difference of
# medians.
declare -A DELTA
for n in $(seq "$REPEAT"); do
	DELTA[d#$n]=$(awk -v a="${CPU[on#$n]}" -v b="${CPU[off#$n]}" 'BEGIN { printf "%.2f", a - b }')
done
delta=$(median DELTA d)
echo
echo "berth security overhead, $(date -u '+%Y-%m-%d %H:%M:%S UTC'); berth $(berth_rev); wrk -t1 -c$CONNS, ${DURATION}s runs, median of $REPEAT"
echo "load average: $LOAD_START at start, $(loadavg) at end"
printf '%-44s %10s %14s %10s\n' "" "req/s" "CPU µs/req" "p99"
printf '%-44s %10s %14s %10s\n' "guard and SIEM off" "$(median RPS off)" "$off" "$(median P99 off)"
printf '%-44s %10s %14s %10s\n' "256 guard rules, SIEM on" "$(median RPS on)" "$on" "$(median P99 on)"
printf '%-44s %10s %14s %10s\n' "blocked (403 by a rule)" "$(median RPS blocked)" "$blocked" "$(median P99 blocked)"
echo "on - off, each run: $(for n in $(seq "$REPEAT"); do printf '%+.2f ' "${DELTA[d#$n]}"; done)"
awk -v d="$delta" -v b="$blocked" 'BEGIN {
	printf "on - off (median of the runs differences): %+.2f µs per request (target <= 3): %s\n", d, (d <= 3 ? "met" : "NOT met")
	printf "blocked: %.2f µs per request (target <= 10): %s\n", b, (b <= 10 ? "met" : "NOT met")
}'
