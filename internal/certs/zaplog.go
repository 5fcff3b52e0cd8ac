package certs

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapLogger is a zap.Logger (what certmagic logs to) writing to log.
// certmagic's Info chatter (locks, each step of an order) is berth's Debug;
// its warnings and errors are berth's Warn (berth logs an order's outcome
// itself).
func zapLogger(log *slog.Logger) *zap.Logger {
	return zap.New(slogCore{h: log.Handler()})
}

type slogCore struct {
	h      slog.Handler
	fields []zapcore.Field
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l < zapcore.InfoLevel:
		return slog.LevelDebug - 4
	case l == zapcore.InfoLevel:
		return slog.LevelDebug
	default:
		return slog.LevelWarn
	}
}

func (c slogCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slogLevel(l))
}

func (c slogCore) With(f []zapcore.Field) zapcore.Core {
	c.fields = append(slices.Clip(c.fields), f...)
	return c
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	r := slog.NewRecord(e.Time, slogLevel(e.Level), "certmagic: "+e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		r.AddAttrs(slog.Any(k, enc.Fields[k]))
	}
	return c.h.Handle(context.Background(), r)
}

func (c slogCore) Sync() error { return nil }
