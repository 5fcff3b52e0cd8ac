package telemetry

import (
	"context"
	"strings"
	"time"
	"unicode"

	"github.com/berth-dev/berth/apitype"
)

// Series is one deployment's metrics over a window, in steps.
type Series struct {
	Buckets    []apitype.ObsMetricBucket
	LogBuckets []apitype.ObsLogBucket
	// Latest is the newest bucket that sampled anything (the window's last
	// bucket when none did).
	Latest              apitype.ObsMetricBucket
	LogLines, ErrorLogs int
}

func ptr(v float64) *float64 { return &v }

// Series reads deployment dep of namespace ns from from (aligned down to
// step, a multiple of Step) to to, one bucket per step.
func (s *Store) Series(ctx context.Context, ns, dep string, from, to time.Time, step time.Duration) (Series, error) {
	stepMs := max(step.Milliseconds(), Step.Milliseconds())
	f := from.UnixMilli()
	f -= f % stepMs
	t := to.UnixMilli()
	n := int((t-f)/stepMs) + 1
	type acc struct {
		requests, errors, lines, errLines int64
		latSum                            float64
		h                                 hist
		samples, usageSamples             int64
		g                                 [6]float64
	}
	accs := make([]acc, n)
	rows, err := s.r.QueryContext(ctx, `SELECT t, requests, errors, lines, err_lines, lat_sum, hist, samples, usage_samples,
		coalesce(cpu,0), coalesce(mem,0), coalesce(in_flight,0), coalesce(ready,0), coalesce(pending,0), coalesce(draining,0)
		FROM metrics WHERE ns = ? AND dep = ? AND t >= ? AND t <= ?`, ns, dep, f, t)
	if err != nil {
		return Series{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var bt, req, errs, lines, errLines, samples, usageSamples int64
		var lat float64
		var h []byte
		var g [6]float64
		if err := rows.Scan(&bt, &req, &errs, &lines, &errLines, &lat, &h, &samples, &usageSamples, &g[0], &g[1], &g[2], &g[3], &g[4], &g[5]); err != nil {
			return Series{}, err
		}
		i := int((bt - f) / stepMs)
		if i < 0 || i >= n {
			continue
		}
		a := &accs[i]
		a.requests += req
		a.errors += errs
		a.lines += lines
		a.errLines += errLines
		a.latSum += lat
		a.h.decodeAdd(h)
		a.samples += samples
		a.usageSamples += usageSamples
		for j := range g {
			a.g[j] += g[j]
		}
	}
	if err := rows.Err(); err != nil {
		return Series{}, err
	}
	secs := float64(stepMs) / 1000
	var out Series
	out.Buckets = make([]apitype.ObsMetricBucket, n)
	out.LogBuckets = make([]apitype.ObsLogBucket, n)
	latest := -1
	for i := range accs {
		a := &accs[i]
		bt := f + int64(i)*stepMs
		b := apitype.ObsMetricBucket{T: bt, RequestsPerSec: ptr(float64(a.requests) / secs), ErrorsPerSec: ptr(float64(a.errors) / secs)}
		if a.requests > 0 {
			b.MeanLatencyMs = ptr(a.latSum / float64(a.requests))
			p50, _ := a.h.quantile(0.50)
			p90, _ := a.h.quantile(0.90)
			p99, _ := a.h.quantile(0.99)
			b.P50Ms, b.P90Ms, b.P99Ms = ptr(p50), ptr(p90), ptr(p99)
		}
		if a.samples > 0 {
			k := float64(a.samples)
			b.InFlight = ptr(a.g[2] / k)
			b.Ready, b.Pending, b.Draining = ptr(a.g[3]/k), ptr(a.g[4]/k), ptr(a.g[5]/k)
		}
		if a.usageSamples > 0 {
			k := float64(a.usageSamples)
			b.CPUPercent, b.MemoryBytes = ptr(a.g[0]/k), ptr(a.g[1]/k)
		}
		if a.requests > 0 || a.samples > 0 {
			latest = i
		}
		out.Buckets[i] = b
		out.LogBuckets[i] = apitype.ObsLogBucket{T: bt, Lines: int(a.lines), Errors: int(a.errLines)}
		out.LogLines += int(a.lines)
		out.ErrorLogs += int(a.errLines)
	}
	if latest < 0 {
		latest = n - 1
	}
	out.Latest = out.Buckets[latest]
	return out, nil
}

// Backends are the backends that logged for dep since from.
func (s *Store) Backends(ctx context.Context, ns, dep string, from time.Time) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT backend FROM backends WHERE ns = ? AND dep = ? AND last_ts >= ? ORDER BY backend`, ns, dep, from.UnixMilli())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var b string
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// Errors is dep's count of error responses (5xx, or none) in the metric
// buckets starting in [from, to).
func (s *Store) Errors(ctx context.Context, ns, dep string, from, to time.Time) (int64, error) {
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(errors), 0) FROM metrics WHERE ns = ? AND dep = ? AND t >= ? AND t < ?`,
		ns, dep, from.UnixMilli(), to.UnixMilli()).Scan(&n)
	return n, err
}

// LogQuery selects one page of a deployment's log lines.
type LogQuery struct {
	Namespace, Deployment string
	From, To              int64 // epoch ms, both inclusive
	Level, Backend        string
	Q                     string // a case-insensitive substring of the message
	Limit                 int
}

// Logs returns the page newest first, and the ts to pass as the next
// page's To (inclusive) when there may be more, else nil.
func (s *Store) Logs(ctx context.Context, q LogQuery) ([]apitype.ObsLogRow, *int64, error) {
	var b strings.Builder
	var args []any
	words := wordsOf(q.Q)
	if len(words) > 0 {
		// Through the index, newest id first: the planner walks logs_fts
		// by rowid descending and stops at the limit.
		b.WriteString(`SELECT l.ts, l.level, l.source, l.message, l.backend, l.host, l.fields
			FROM logs_fts f CROSS JOIN logs l ON l.id = f.rowid
			WHERE logs_fts MATCH ? AND `)
		var m strings.Builder
		m.WriteString(`k : "` + depKey(q.Namespace, q.Deployment) + `" AND message : (`)
		for i, w := range words {
			if i > 0 {
				m.WriteString(" AND ")
			}
			m.WriteString(`"` + w + `" *`)
		}
		m.WriteString(")")
		args = append(args, m.String())
	} else {
		b.WriteString(`SELECT l.ts, l.level, l.source, l.message, l.backend, l.host, l.fields FROM logs l WHERE `)
	}
	b.WriteString(`l.ns = ? AND l.dep = ? AND l.ts >= ? AND l.ts <= ?`)
	args = append(args, q.Namespace, q.Deployment, q.From, q.To)
	if q.Level != "" {
		b.WriteString(` AND l.level = ?`)
		args = append(args, q.Level)
	}
	if q.Backend != "" {
		b.WriteString(` AND l.backend = ?`)
		args = append(args, q.Backend)
	}
	if q.Q != "" {
		b.WriteString(` AND instr(lower(l.message), lower(?)) > 0`)
		args = append(args, q.Q)
	}
	if len(words) > 0 {
		b.WriteString(` ORDER BY f.rowid DESC LIMIT ?`)
	} else {
		b.WriteString(` ORDER BY l.ts DESC, l.id DESC LIMIT ?`)
	}
	args = append(args, q.Limit+1)
	rows, err := s.r.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	out := []apitype.ObsLogRow{}
	more := false
	for rows.Next() {
		if len(out) == q.Limit {
			more = true
			break
		}
		var r apitype.ObsLogRow
		var level, backend, host, fields string
		if err := rows.Scan(&r.Ts, &level, &r.Source, &r.Message, &backend, &host, &fields); err != nil {
			return nil, nil, err
		}
		r.Level, r.Backend, r.Host, r.Fields = opt(level), opt(backend), opt(host), opt(fields)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if !more || len(out) == 0 {
		return out, nil, nil
	}
	next := out[len(out)-1].Ts
	if next >= q.To {
		// A whole page in one millisecond: step past it, or the next
		// page would be this one again.
		next = q.To - 1
	}
	return out, &next, nil
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// wordsOf splits q into the index's tokens (letters and digits, as FTS5's
// unicode61 tokenizer), quoted for a MATCH.
func wordsOf(q string) []string {
	return strings.FieldsFunc(q, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsNumber(r) })
}
