package tracing_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/tracing"
	"github.com/berth-dev/berth/internal/tracing/otlptest"
)

func TestConfigRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		c    tracing.Config
		want string
	}{
		{tracing.Config{Endpoint: "collector", Sample: 1}, "--otlp-endpoint"},
		{tracing.Config{Endpoint: "collector:port", Sample: 1}, "--otlp-endpoint"},
		{tracing.Config{Endpoint: "collector:0", Sample: 1}, "--otlp-endpoint"},
		{tracing.Config{Endpoint: ":4318", Sample: 1}, "--otlp-endpoint"},
		{tracing.Config{Endpoint: "grpc://collector:4317", Sample: 1}, "OTLP over HTTP only"},
		{tracing.Config{Endpoint: "http://collector:4318", Sample: 1}, "--otlp-insecure"},
		{tracing.Config{Endpoint: "https://collector:4318", Insecure: true, Sample: 1}, "--otlp-insecure"},
		{tracing.Config{Endpoint: "https://u:p@collector:4318", Sample: 1}, "no user"},
		{tracing.Config{Endpoint: "https://collector", Sample: 1}, "--otlp-endpoint"},
		{tracing.Config{Endpoint: "http://%zz", Insecure: true, Sample: 1}, "--otlp-endpoint"},
		{tracing.Config{Insecure: true, Sample: 1}, "--otlp-insecure needs --otlp-endpoint"},
		{tracing.Config{Endpoint: "collector:4318", Sample: 1.5}, "--trace-sample"},
		{tracing.Config{Endpoint: "collector:4318", Sample: -0.1}, "--trace-sample"},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.c, err, tc.want)
		}
		if tr, err := tracing.New(tc.c); err == nil || tr != nil {
			t.Errorf("New(%+v) = %v, %v; want the error", tc.c, tr, err)
		}
	}
	for _, c := range []tracing.Config{
		{Sample: 1},
		{Endpoint: "collector:4318", Sample: 1},
		{Endpoint: "[::1]:4318", Insecure: true},
		{Endpoint: "http://127.0.0.1:4318/otlp/v1/traces", Insecure: true, Sample: 0.5},
		{Endpoint: "https://collector.example:443", Sample: 1},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if tr, err := tracing.New(tracing.Config{Sample: 1}); tr != nil || err != nil {
		t.Errorf("no endpoint: %v, %v; want tracing off", tr, err)
	}
}

// TestExport: spans reach a collector over OTLP/HTTP, with berth as their
// service, and are counted.
func TestExport(t *testing.T) {
	recv := otlptest.Start(t)
	tr, err := tracing.New(tracing.Config{Endpoint: recv.Addr, Insecure: true, Sample: 1, ServiceVersion: "v-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	_, s := tr.Tracer().Start(context.Background(), "one")
	s.End()
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := recv.Named("one")
	if len(got) != 1 || got[0].Service != "berth" {
		t.Fatalf("received %+v, want span one of service berth", recv.Spans())
	}
	if tr.Exported() != 1 || tr.Dropped() != 0 {
		t.Errorf("exported %d, dropped %d; want 1, 0", tr.Exported(), tr.Dropped())
	}
}

// TestCollectorDown: spans for a collector that is not there, or that
// hangs, are dropped and counted; ending a span never waits for it.
func TestCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there now

	hung := otlptest.Start(t)
	hung.Stall()
	for name, addr := range map[string]string{"refused": down, "hung": hung.Addr} {
		t.Run(name, func(t *testing.T) {
			tr, err := tracing.New(tracing.Config{Endpoint: addr, Insecure: true, Sample: 1, ExportTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close(context.Background())
			for range 3 {
				_, s := tr.Tracer().Start(context.Background(), "lost")
				s.End()
			}
			tr.Flush(context.Background()) // returns once the export has failed
			if tr.Dropped() != 3 || tr.Exported() != 0 {
				t.Errorf("dropped %d, exported %d; want 3, 0", tr.Dropped(), tr.Exported())
			}
		})
	}
	if hung.Requests() == 0 {
		t.Error("the hung collector was never asked")
	}
}
