#!/usr/bin/env bash
# bench/profile.sh — where berth's proxy spends its time in the keep-alive
# scenario of bench/proxy.sh (GET / through one static deployment, 12-byte
# body), with measures that a loaded machine disturbs little:
#   1. perf stat (task-clock, context switches, hardware counters where the
#      kernel exposes them) and perf record (call graphs) of berth under
#      wrk -t1 -c$CONNS, when perf can run here (it installs linux-perf);
#      otherwise it says why and goes on;
#   2. a Go CPU profile of the proxy's own end-to-end benchmark
#      (go test -bench $PPROF_BENCH -cpuprofile in internal/proxy; berth serve
#      has no pprof endpoint), top functions;
#   3. syscalls per request: strace -c -f attached to berth while
#      bench/seqget sends $N sequential keep-alive GETs (after a warm-up), the
#      same against nginx's worker (the config of bench/proxy.sh) beside it,
#      and one request's syscalls through berth in order;
#   4. instructions per request: berth (CGO_ENABLED=0, GODEBUG=asyncpreemptoff=1,
#      PATH without ip: callgrind cannot follow Go's preemption signals, cgo's
#      thread start or the SIGCHLD of the "ip link show" berth runs at start)
#      under valgrind --tool=callgrind; after a warm-up of $WARM_REQS
#      requests, counters are zeroed, $N requests sent, dumped; zeroed again,
#      2x$N sent, dumped; instructions/request = (Ir(2N) - Ir(N)) / N, which
#      cancels the connection's setup and anything else fixed; the same for
#      nginx (master_process off, so the one process serves), and the ratio.
# Everything lands in bench/out/profile-<time>/ (perf.data, cpu.pprof,
# callgrind dumps for callgrind_annotate). Every process it starts is stopped
# on exit (trap); every step is bounded by a timeout.
#
# Environment knobs (defaults in brackets):
#   STEPS ["perf pprof strace callgrind"]  which steps to run
#   DURATION [5]   seconds of each wrk run under perf
#   WARMUP [2]     seconds of wrk warm-up
#   CONNS [50]     wrk connections
#   N [2000]       requests per measured batch (strace, callgrind)
#   WARM_REQS [200] requests before the measured batches
#   CG_REPEAT [3]  callgrind (N, 2N) pairs; the report gives each and the median
#   PPROF_BENCH ['BenchmarkH1$']  the internal/proxy benchmark to profile
#   PORT_BASE [18280]  where to start looking for four consecutive free ports
#   BERTH_BIN [unset: go build ./cmd/berth]  a prebuilt berth (used for every step
#                  but pprof, which profiles this tree's internal/proxy)
set -euo pipefail
cd "$(dirname "$0")/.."
PORT_BASE=${PORT_BASE:-18280}
# shellcheck source=bench/lib.sh
. bench/lib.sh

STEPS=${STEPS:-perf pprof strace callgrind}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-2}
CONNS=${CONNS:-50}
N=${N:-2000}
WARM_REQS=${WARM_REQS:-200}
CG_REPEAT=${CG_REPEAT:-3}
PPROF_BENCH=${PPROF_BENCH:-BenchmarkH1\$}
step() { [[ " $STEPS " == *" $1 "* ]]; }

tools=(wrk:wrk curl:curl)
# nginx is the reference of the strace and callgrind steps.
{ step strace || step callgrind; } && tools+=(nginx:nginx)
step perf && tools+=(perf:linux-perf)
step strace && tools+=(strace:strace)
step callgrind && tools+=(valgrind:valgrind)
need_tools "${tools[@]}"
raise_nofile
build_tools upstream seqget
if step callgrind; then
	if [[ -n ${BERTH_BIN:-} ]]; then
		cp "$BERTH_BIN" "$WORK/berth-static"
	else
		CGO_ENABLED=0 go build -o "$WORK/berth-static" ./cmd/berth
	fi
fi

PORT_BASE=$(pick_ports 4)
P_UP=$PORT_BASE P_BERTH=$((PORT_BASE + 1)) P_ADMIN=$((PORT_BASE + 2)) P_NGINX=$((PORT_BASE + 3))
log "ports $P_UP (upstream), $P_BERTH (berth; admin $P_ADMIN), $P_NGINX (nginx, the reference)"
LOAD_START=$(loadavg)
warn_load
OUTDIR="$ROOT/bench/out/profile-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUTDIR"
SUMMARY="$OUTDIR/summary.txt"
say() { echo "$*" | tee -a "$SUMMARY"; }
say "berth profile (keep-alive GET /, 12 B body), $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "machine: $(nproc) CPUs, $(uname -r); berth $(berth_rev); load average $LOAD_START at start"

start_upstream "$P_UP"
wait_port "$P_UP"
berth_up() {
	wait_port "$P_BERTH" "${1:-10}"
	wait_port "$P_ADMIN" "${1:-10}"
	register_bench "$P_ADMIN" "$P_UP"
	curl -sf --max-time 30 "http://127.0.0.1:$P_BERTH/" >/dev/null || die "GET through berth failed"
}
# seqget PORT REQS [TIMEOUT]: REQS sequential keep-alive GETs on one connection.
seqget() { timeout "${3:-120}" "$WORK/seqget" -addr "127.0.0.1:$1" -n "$2" >/dev/null || die "seqget -n $2 against port $1 failed"; }
if step perf || step strace; then
	start_berth "$P_BERTH" "$P_ADMIN"
	berth_up
fi

# ---- 1. perf -----------------------------------------------------------------
if step perf; then
	say
	say "== perf: berth under wrk -t1 -c$CONNS -d${DURATION}s (after ${WARMUP}s warm-up)"
	if ! perf stat -e task-clock -o /dev/null true 2>"$WORK/perf-check.err"; then
		say "perf cannot run here: $(tr '\n' ' ' <"$WORK/perf-check.err")"
	else
		url="http://127.0.0.1:$P_BERTH/"
		timeout $((WARMUP + 30)) wrk -t1 -c"$CONNS" -d"${WARMUP}s" "$url" >/dev/null
		# System calls under load (the tracepoint counts every one, all
		# threads), where the kernel has it.
		sysev=
		perf stat -e raw_syscalls:sys_enter -o /dev/null true 2>/dev/null && sysev=,raw_syscalls:sys_enter
		timeout $((DURATION + 30)) perf stat -x, -o "$OUTDIR/perf-stat.csv" \
			-e task-clock,context-switches,cpu-migrations,page-faults,cycles,instructions$sysev \
			-p "$PID_BERTH" -- sleep "$((DURATION + 1))" &
		pst=$!
		sleep 0.5
		timeout $((DURATION + 30)) wrk -t1 -c"$CONNS" -d"${DURATION}s" "$url" >"$OUTDIR/wrk-perf-stat.txt"
		wait "$pst" || log "warning: perf stat exited $?"
		reqs=$(awk '/requests in/ {print $1}' "$OUTDIR/wrk-perf-stat.txt")
		say "$(awk '/^Requests\/sec/ {printf "%.0f req/s", $2}' "$OUTDIR/wrk-perf-stat.txt") while counted ($reqs requests)"
		# CSV: value,unit,event,... ; "<not supported>" where the PMU is absent.
		awk -F, -v n="$reqs" '
			$3 == "" { next }
			$1 ~ /not (supported|counted)/ { printf "  %-18s %s\n", $3, $1; next }
			$3 ~ /^task-clock/ { printf "  %-18s %.1f µs CPU/request (%.2f CPUs busy)\n", "task-clock", $1 * 1000 / n, $6; next }
			{ printf "  %-18s %.3f /request (%s total)\n", $3, $1 / n, $1 }' "$OUTDIR/perf-stat.csv" | tee -a "$SUMMARY"
		grep -q 'not supported' "$OUTDIR/perf-stat.csv" &&
			say "  (hardware counters are not exposed to this kernel/VM: software events only; use the callgrind step for instruction counts)"
		timeout $((WARMUP + 30)) wrk -t1 -c"$CONNS" -d"${WARMUP}s" "$url" >/dev/null
		timeout $((DURATION + 30)) perf record -F 999 -g -o "$OUTDIR/perf.data" -p "$PID_BERTH" -- sleep "$DURATION" \
			>/dev/null 2>"$WORK/perf-record.err" &
		prec=$!
		sleep 0.3
		t0=$(ticks "$PID_BERTH")
		timeout $((DURATION + 30)) wrk -t1 -c"$CONNS" -d"${DURATION}s" "$url" >"$WORK/wrk-perf-record.txt"
		t1=$(ticks "$PID_BERTH")
		rec_reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk-perf-record.txt")
		rec_us=$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="${rec_reqs:-0}" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print 0 }')
		if wait "$prec" && [[ -s $OUTDIR/perf.data ]]; then
			say "where a request's CPU goes ($rec_us µs per request while recorded, perf under it included), by kind of work (bench/perfbuckets.awk):"
			timeout 120 perf report -i "$OUTDIR/perf.data" --stdio --no-children --sort dso,symbol -g none 2>/dev/null |
				awk -v us="$rec_us" -f "$ROOT/bench/perfbuckets.awk" | tee -a "$SUMMARY" || true
			say "the kernel's share by system call (inclusive, µs per request):"
			timeout 120 perf report -i "$OUTDIR/perf.data" --stdio --children --sort symbol -g none 2>/dev/null |
				sed 's/[ -]*$//' | awk -v us="$rec_us" '$NF ~ /^(ksys_write|ksys_read|__x64_sys_recvfrom|__x64_sys_epoll_pwait|__x64_sys_futex|__x64_sys_nanosleep|__x64_sys_accept4|__x64_sys_close)$/ { pct = $1; sub(/%/, "", pct); printf "  %-24s %6.2f\n", $NF, pct / 100 * us }' | tee -a "$SUMMARY" || true
			say "perf record: samples by binary, then the top symbols (self time, all threads; perf report -i $OUTDIR/perf.data for more)"
			# perf appends empty branch columns ("-  -"); they go.
			timeout 120 perf report -i "$OUTDIR/perf.data" --stdio --no-children --sort dso -g none 2>/dev/null |
				grep -E '^ +[0-9.]+%' | sed 's/[ -]*$//' | head -6 | tee -a "$SUMMARY" || true
			timeout 120 perf report -i "$OUTDIR/perf.data" --stdio --no-children --sort dso,symbol -g none --percent-limit 0.5 2>/dev/null |
				grep -E '^ +[0-9.]+%' | sed 's/[ -]*$//' | head -30 | tee -a "$SUMMARY" || true
		else
			say "perf record failed: $(tail -2 "$WORK/perf-record.err" | tr '\n' ' ')"
		fi
	fi
fi

# ---- 2. Go CPU profile -------------------------------------------------------
if step pprof; then
	say
	say "== pprof: go test -run '^\$' -bench '$PPROF_BENCH' -benchtime 3s -benchmem -cpuprofile ./internal/proxy/ (this tree's code)"
	if timeout 600 go test -run '^$' -bench "$PPROF_BENCH" -benchtime 3s -benchmem \
		-cpuprofile "$OUTDIR/cpu.pprof" -o "$OUTDIR/proxy.test" ./internal/proxy/ >"$OUTDIR/go-bench.txt" 2>&1 &&
		grep -q '^Benchmark' "$OUTDIR/go-bench.txt"; then
		grep '^Benchmark' "$OUTDIR/go-bench.txt" | tee -a "$SUMMARY"
		say "top functions (flat; go tool pprof -top $OUTDIR/proxy.test $OUTDIR/cpu.pprof for all):"
		timeout 120 go tool pprof -top -nodecount 25 "$OUTDIR/proxy.test" "$OUTDIR/cpu.pprof" 2>/dev/null |
			sed -n '/flat%/,$p' | tee -a "$SUMMARY" || true
	else
		say "no benchmark matching '$PPROF_BENCH' ran in internal/proxy (set PPROF_BENCH): $(tail -3 "$OUTDIR/go-bench.txt" | tr '\n' ' ')"
	fi
fi

# ---- 3. syscalls per request -------------------------------------------------
# strace_count PORT PID NAME: strace -c -f on PID while N requests go to PORT;
# the table lands in $OUTDIR/strace-NAME.txt.
strace_count() {
	local pstr
	seqget "$1" "$WARM_REQS"
	strace -c -f -p "$2" -o "$OUTDIR/strace-$3.txt" 2>"$WORK/strace.err" &
	pstr=$!
	# strace reports each thread it attached to; wait for them all.
	for _ in $(seq 50); do grep -q attached "$WORK/strace.err" 2>/dev/null && break; sleep 0.1; done
	sleep 0.5
	seqget "$1" "$N" 300
	kill -INT "$pstr" 2>/dev/null || true
	wait "$pstr" 2>/dev/null || true
}
if step strace; then
	say
	say "== strace -c -f: syscalls over $N sequential keep-alive GETs on one connection (after $WARM_REQS), berth and nginx (its worker)"
	strace_count "$P_BERTH" "$PID_BERTH" berth
	start_nginx "$P_NGINX" "$P_UP"
	wait_port "$P_NGINX"
	strace_count "$P_NGINX" "$(pgrep -P "$PID_NGINX" | head -1)" nginx
	stop "$PID_NGINX"
	# Table rows: % time, seconds, usecs/call, calls, [errors], syscall.
	awk -v n="$N" '
		FNR == 1 { who = (FILENAME ~ /berth/) ? "b" : "g" }
		$1 ~ /^[0-9.]+$/ && $NF != "total" { c[who, $NF] = $4; t[who] += $4; names[$NF] = 1 }
		END {
			printf "  %-20s %10s %10s\n", "syscall", "berth/req", "nginx/req"
			fflush()
			for (s in names) printf "  %-20s %10.3f %10.3f\n", s, c["b", s] / n, c["g", s] / n | "sort -k2 -gr"
			close("sort -k2 -gr")
			printf "  %-20s %10.2f %10.2f\n", "total", t["b"] / n, t["g"] / n
		}' "$OUTDIR/strace-berth.txt" "$OUTDIR/strace-nginx.txt" | tee -a "$SUMMARY"
	say "one request through berth, its syscalls (the 5th of 6 on a fresh connection; futex, nanosleep and sched_yield left out; all in $OUTDIR/strace-seq.txt):"
	strace -f -tt -p "$PID_BERTH" -e 'trace=!futex,nanosleep,sched_yield' -o "$OUTDIR/strace-seq.txt" 2>"$WORK/strace2.err" &
	pstr=$!
	for _ in $(seq 50); do grep -q attached "$WORK/strace2.err" 2>/dev/null && break; sleep 0.1; done
	sleep 0.5
	timeout 60 "$WORK/seqget" -addr "127.0.0.1:$P_BERTH" -n 6 -path /5th-of-6 >/dev/null || true
	sleep 0.3
	kill -INT "$pstr" 2>/dev/null || true
	wait "$pstr" 2>/dev/null || true
	# Requests are told apart by what the client sent: each one reads "GET /".
	awk '/read(\(| resumed>).*"GET \// { n++ } n == 5 && !/epoll_pwait\(.*= 0$/' "$OUTDIR/strace-seq.txt" |
		sed -E 's/^([0-9]+) +[0-9:.]+ /\1 /; s/(".{0,40})[^"]*"(\.\.\.)?/\1..."/' | head -20 | tee -a "$SUMMARY"
fi
if [[ -n ${PID_BERTH:-} ]] && kill -0 "$PID_BERTH" 2>/dev/null; then stop "$PID_BERTH"; fi

# ---- 4. instructions per request ---------------------------------------------
# ir_batch PORT PID NAME REQS: zero PID's callgrind counters, send REQS
# requests to PORT, dump; prints the dump's Ir.
ir_batch() {
	local before after f
	callgrind_control -z "$2" >/dev/null 2>&1 || die "callgrind_control -z $2 failed"
	seqget "$1" "$4" 600
	before=$(find "$OUTDIR" -name "callgrind-$3.out.*.*" | wc -l)
	callgrind_control -d "$2" >/dev/null 2>&1 || die "callgrind_control -d $2 failed"
	for _ in $(seq 100); do
		after=$(find "$OUTDIR" -name "callgrind-$3.out.*.*" | wc -l)
		((after > before)) && break
		sleep 0.1
	done
	f=$(find "$OUTDIR" -name "callgrind-$3.out.*.*" -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2)
	awk '$1 == "summary:" || $1 == "totals:" {print $2; exit}' "$f"
}
# ir_per_request PORT PID NAME: CG_REPEAT pairs (N, 2N); prints the median.
ir_per_request() {
	local i ir1 ir2 p per=()
	seqget "$1" "$WARM_REQS" 300
	for i in $(seq "$CG_REPEAT"); do
		ir1=$(ir_batch "$1" "$2" "$3" "$N")
		ir2=$(ir_batch "$1" "$2" "$3" $((2 * N)))
		p=$(((ir2 - ir1) / N))
		per+=("$p")
		say "  $3 pair $i: Ir($N) = $ir1, Ir($((2 * N))) = $ir2: $p instructions/request ($((ir1 / N)) counting the connection's setup)" >&2
	done
	printf '%s\n' "${per[@]}" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'
}
if step callgrind; then
	say
	say "== callgrind: instructions per keep-alive GET; berth (CGO_ENABLED=0, GODEBUG=asyncpreemptoff=1) and nginx (master_process off) under valgrind --tool=callgrind"
	VALGRIND=$(command -v valgrind)
	# berth runs "ip link show" at start; the SIGCHLD of that child trips a
	# callgrind assertion (threads.c: sigNum == current_state.sig), so berth
	# gets a PATH where ip is not found.
	BERTH_EXE="$WORK/berth-static" GODEBUG=asyncpreemptoff=1 start_berth "$P_BERTH" "$P_ADMIN" \
		env PATH=/var/empty "$VALGRIND" --tool=callgrind --callgrind-out-file="$OUTDIR/callgrind-berth.out.%p"
	berth_up 120
	IR_BERTH=$(ir_per_request "$P_BERTH" "$PID_BERTH" berth)
	stop "$PID_BERTH"
	NGINX_MASTER=off start_nginx "$P_NGINX" "$P_UP" "$VALGRIND" --tool=callgrind \
		--callgrind-out-file="$OUTDIR/callgrind-nginx.out.%p"
	wait_port "$P_NGINX" 60
	IR_NGINX=$(ir_per_request "$P_NGINX" "$PID_NGINX" nginx)
	stop "$PID_NGINX"
	say "instructions/request: berth $IR_BERTH, nginx $IR_NGINX, berth/nginx $(awk -v a="$IR_BERTH" -v b="$IR_NGINX" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')x (medians of $CG_REPEAT; callgrind_annotate $OUTDIR/callgrind-<name>.out.<pid>.<n> for the counts, though Go code defeats its per-function attribution: see perf and pprof above for where)"
fi
say
say "load average at end: $(loadavg)"
log "results in $OUTDIR"
