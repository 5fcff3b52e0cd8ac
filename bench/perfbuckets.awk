# perfbuckets.awk — berth's perf samples by kind of work, for the per-request
# breakdown. Input: perf report --stdio --no-children --sort dso,symbol -g none.
# With -v us=<CPU µs per request> each share is also given in µs per request.
#   kernel: write / read / other system calls (perf report --children has
#   the split by system call); the rest by Go symbol.
/^ +[0-9.]+%/ {
	pct = $1; sub(/%/, "", pct); pct += 0
	kind = $3; sym = $0; sub(/^ +[0-9.]+% +[^ ]+ +\[.\] +/, "", sym)
	total += pct
	if (kind == "[k]") b = "kernel (system calls, TCP, loopback delivery, scheduling)"
	else if ($2 ~ /vdso/ || sym ~ /nanotime|time\.now|time\.Now|clock_gettime/) b = "clock reads"
	else if (sym ~ /mallocgc|gcBgMark|scanobject|gcDrain|greyobject|findObject|heapBits|nextFree|sweep|markBits|memclrNoHeap|wbBuf|bulkBarrier|mspan|mcache|mcentral|mheap/) b = "allocation and GC"
	else if (sym ~ /runtime\.(schedule|findRunnable|park_m|netpoll|sysmon|mcall|gopark|goready|ready|wakep|startm|stopm|notewakeup|notesleep|futex|usleep|osyield|procyield|runqgrab|runqsteal|stealWork|casgstatus|execute|gogo|retake|checkTimers|resetspinning|lock2|unlock2|runqput|runqget|globrunq|injectglist|selectgo|chanrecv|chansend)/ || sym ~ /procyieldAsm/) b = "scheduling (park and wake, netpoll, sysmon)"
	else if (sym ~ /Syscall|syscall\.|entersyscall|exitsyscall|reentersyscall|internal\/poll|netFD|net\.\(\*conn\)|net\.\(\*rawConn\)|runtime_pollReset|pollSetDeadline|fdMutex|rawIO|RawRead|RawWrite/) b = "system call glue (Go's poller, rawIO)"
	else if (sym ~ /parse|readHead|fastResponse|textproto|ReadResponse|readTransfer|ReadLine|ReadSlice|canonical|Reader\)\.(fill|Peek|Read|Discard)|indexbyte|IndexByte|bytes\.Index|memeqbody|validField|trimOWS|plainPath|validURI|validToken|validHost|checkFields/) b = "parsing"
	else if (sym ~ /map|Header|copyHeader|writeHead|writeHeaderLines|commit|hopByHop|listedIn|forwarded|aeshash|maps\.|WriteString|Writer\)\.(Write|Flush)|appendHop|writeField|writeAddr|statusLine|dateLine/) b = "header work"
	else if (sym ~ /metrics|observe|Observe|Histogram|StatusCounts/) b = "metrics"
	else if (sym ~ /route\.|Lookup|NormalizeHost|lookup|forSite/) b = "routing"
	else b = "other (relay, pools, timers, body copy)"
	share[b] += pct
}
END {
	n = 0
	for (b in share) order[++n] = b
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (share[order[j]] > share[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
	for (i = 1; i <= n; i++) {
		b = order[i]
		if (us > 0) printf "  %-58s %5.1f%%  %5.2f µs/request\n", b, share[b] / total * 100, share[b] / total * us
		else printf "  %-58s %5.1f%%\n", b, share[b] / total * 100
	}
}
