# shellcheck shell=bash
# bench/lib.sh — what bench/proxy.sh, bench/memory.sh and bench/profile.sh
# share: logging, the exit trap that stops every process they start, free
# ports, CPU ticks and RSS from /proc, building the Go tools, and starting the
# upstream, berth and nginx. Sourced, never run; the caller sets -euo pipefail
# and cds to the repository root first.

export PATH="$PATH:/usr/sbin:/sbin"
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
ROOT=$(pwd)
HZ=$(getconf CLK_TCK) # used by the scripts that source this
export HZ

log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
	log "error: $*"
	local f
	for f in "${WORK:-/nonexistent}"/*.log "${WORK:-/nonexistent}"/nginx/logs/error.log; do
		[[ -s $f ]] && { echo "--- $f" >&2; tail -5 "$f" >&2; }
	done
	exit 1
}

# need_tools CMD:PACKAGE...: apt-get installs the packages of the commands
# that are missing (needs root).
need_tools() {
	local cp missing=()
	for cp in "$@"; do command -v "${cp%%:*}" >/dev/null || missing+=("${cp#*:}"); done
	((${#missing[@]})) || return 0
	[[ $(id -u) == 0 ]] || die "need root to install ${missing[*]}"
	log "installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ---- processes -----------------------------------------------------------------
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

# stop PID: stop one process this script started and forget it.
stop() {
	local p=$1 q keep=()
	kill "$p" 2>/dev/null || true
	for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
	for q in "${PIDS[@]}"; do [[ $q == "$p" ]] || keep+=("$q"); done
	PIDS=("${keep[@]}")
}

# raise_nofile: as many file descriptors as the hard limit allows (c1000 and
# the idle-connection runs hold thousands of sockets).
raise_nofile() {
	ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
}

# ---- ports -----------------------------------------------------------------------
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# wait_port PORT [SECONDS, default 10]
wait_port() {
	local i n=$((${2:-10} * 10))
	for ((i = 0; i < n; i++)); do port_open "$1" && return 0; sleep 0.1; done
	die "nothing listens on 127.0.0.1:$1 after ${2:-10} s (see $WORK/*.log)"
}
# pick_ports N: prints the first base, from PORT_BASE up in steps of 10, such
# that no TCP socket of this host (any state, IPv4 or IPv6) uses any of
# base .. base+N-1. Below the ephemeral range by default, so outgoing
# connections do not take them either.
pick_ports() {
	local n=$1 l p base i ok
	local -A used=()
	while read -r _ l _; do
		p=${l##*:}
		[[ $p =~ ^[0-9A-Fa-f]{4}$ ]] && used[$((16#$p))]=1
	done < <(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null)
	base=${PORT_BASE:-18080}
	for _ in $(seq 200); do
		ok=1
		for ((i = 0; i < n; i++)); do [[ -n ${used[$((base + i))]:-} ]] && { ok=0; break; }; done
		((ok)) && { echo "$base"; return 0; }
		base=$((base + 10))
	done
	die "no $n consecutive free ports from ${PORT_BASE:-18080} on"
}

# ---- /proc -----------------------------------------------------------------------
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
# rss_kib PID...: VmRSS summed over the processes, in KiB.
rss_kib() {
	local p t=0 v
	for p in "$@"; do
		v=$(awk '$1 == "VmRSS:" {print $2}' "/proc/$p/status") || die "process $p is gone"
		t=$((t + ${v:-0}))
	done
	echo "$t"
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
warn_load() {
	local l
	l=$(loadavg)
	if awk -v l="${l%% *}" 'BEGIN { exit !(l > 1.0) }'; then
		log "warning: load average $l before starting: other work shares these CPUs and inflates every figure"
	fi
}
berth_rev() {
	echo "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet -- internal/proxy 2>/dev/null || echo '+dirty')"
}

BERTH_SERVE_ARGS=()

# tls_cert: an ECDSA P-256 certificate for 127.0.0.1 and bench.test,
# self-signed, in $WORK/tls.{crt,key}: the one berth and nginx both serve.
tls_cert() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj /CN=bench.test -addext "subjectAltName=DNS:bench.test,IP:127.0.0.1" \
		-keyout "$WORK/tls.key" -out "$WORK/tls.crt" 2>"$WORK/openssl.log" || die "openssl could not make the bench certificate"
}

# ---- build and start -------------------------------------------------------------
# build_tools DIR...: berth (or BERTH_BIN) and the named bench/ programs into $WORK.
build_tools() {
	local t
	log "building berth, bench/{$(IFS=,; echo "$*")}"
	if [[ -n ${BERTH_BIN:-} ]]; then
		cp "$BERTH_BIN" "$WORK/berth"
	else
		go build -o "$WORK/berth" ./cmd/berth
	fi
	for t in "$@"; do go build -o "$WORK/$t" "./bench/$t"; done
}

# start_upstream PORT: bench/upstream; sets PID_UP.
start_upstream() {
	"$WORK/upstream" -addr "127.0.0.1:$1" 2>"$WORK/upstream.log" &
	PID_UP=$!
	PIDS+=("$PID_UP")
}

# start_berth PROXY_PORT ADMIN_PORT [WRAPPER...]: berth serve ($BERTH_EXE,
# default $WORK/berth) with a fresh data dir, no host setup, and the serve
# flags in the array BERTH_SERVE_ARGS (none by default); the optional
# wrapper (valgrind ...) execs it, so PID_BERTH is the process that runs
# berth's code either way. Sets PID_BERTH.
start_berth() {
	local pp=$1 ap=$2
	shift 2
	rm -rf "$WORK/berth-data"
	mkdir -p "$WORK/berth-data"
	(
		[[ -n ${BERTH_GOMAXPROCS:-} ]] && export GOMAXPROCS=$BERTH_GOMAXPROCS
		# Only process replicas here: leave the host's bridge and cgroups as
		# they are (an env var, so that older binaries under BERTH_BIN run too),
		# and no egress proxy for Computers.
		export BERTH_NO_HOST_SETUP=1 BERTH_EGRESS_ADDR=off
		exec "$@" "${BERTH_EXE:-$WORK/berth}" serve --proxy-addr "127.0.0.1:$pp" --admin-addr "127.0.0.1:$ap" \
			--data-dir "$WORK/berth-data" --log-level warn "${BERTH_SERVE_ARGS[@]}"
	) 2>"$WORK/berth.log" &
	PID_BERTH=$!
	PIDS+=("$PID_BERTH")
}

# register_bench ADMIN_PORT UPSTREAM_PORT: the deployment "bench", every path
# to the upstream.
register_bench() {
	curl -sf --max-time 10 -X POST -H 'Content-Type: application/json' "http://127.0.0.1:$1/deployments" \
		-d "{\"id\":\"bench\",\"routes\":[{\"path_prefix\":\"/\"}],\"upstreams\":[\"127.0.0.1:$2\"]}" >/dev/null ||
		die "registering the bench deployment with berth failed (see $WORK/berth.log)"
}

# start_nginx PORT UPSTREAM_PORT [WRAPPER...]: nginx, one worker, upstream
# keep-alive, websocket upgrades passed through; sets PID_NGINX (the master).
# NGINX_MASTER=off: no master, the one process serves (for valgrind).
start_nginx() {
	local np=$1 nu=$2
	shift 2
	mkdir -p "$WORK/nginx/logs" "$WORK/nginx/tmp"
	cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 1;
worker_rlimit_nofile 16384;
daemon off;
master_process ${NGINX_MASTER:-on};
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 8192; }
http {
	access_log off;
	client_body_temp_path $WORK/nginx/tmp/body;
	proxy_temp_path $WORK/nginx/tmp/proxy;
	fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
	uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
	scgi_temp_path $WORK/nginx/tmp/scgi;
	# A websocket upgrade passes "Connection: upgrade"; any other request
	# sends none, so the upstream connection stays in the keep-alive pool.
	map \$http_upgrade \$connection_upgrade {
		default upgrade;
		'' '';
	}
	upstream up {
		server 127.0.0.1:$nu;
		keepalive 128;
	}
	# No cap on requests per client connection (the default closes one
	# after 1,000), as berth and haproxy have none.
	keepalive_requests 1000000;
	# With NGINX_TLS_PORT: the same proxying over TLS too, with
	# $WORK/tls.{crt,key} (tls_cert), TLS 1.2 and 1.3 (TLS 1.3 held to
	# TLS_AES_128_GCM_SHA256, the suite Go picks first, so both servers
	# do the same cipher work), session tickets and cache as nginx's
	# defaults leave them.
	server {
		listen 127.0.0.1:$np;
		${NGINX_TLS_PORT:+listen 127.0.0.1:$NGINX_TLS_PORT ssl;}
		${NGINX_TLS_PORT:+ssl_certificate $WORK/tls.crt;}
		${NGINX_TLS_PORT:+ssl_certificate_key $WORK/tls.key;}
		${NGINX_TLS_PORT:+ssl_protocols TLSv1.2 TLSv1.3;}
		${NGINX_TLS_PORT:+ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;}
		location / {
			proxy_pass http://up;
			proxy_http_version 1.1;
			proxy_set_header Upgrade \$http_upgrade;
			proxy_set_header Connection \$connection_upgrade;
			proxy_set_header Host \$host;
			proxy_set_header X-Forwarded-For \$remote_addr;
			proxy_set_header X-Forwarded-Proto \$scheme;
			proxy_read_timeout 60s;
		}
	}
}
EOF
	"$@" "$(command -v nginx)" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" 2>"$WORK/nginx.log" &
	PID_NGINX=$!
	PIDS+=("$PID_NGINX")
}
nginx_pids() { echo "$PID_NGINX $(pgrep -P "$PID_NGINX" | tr '\n' ' ')"; }
