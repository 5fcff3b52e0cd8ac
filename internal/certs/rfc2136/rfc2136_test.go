package rfc2136_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/certs/rfc2136"
	"github.com/berth-dev/berth/internal/certs/rfc2136/bindtest"
	"github.com/libdns/libdns"
)

func TestParse(t *testing.T) {
	p, err := rfc2136.Parse("rfc2136://berth-key:c2VjcmV0+/8=@127.0.0.1:5353?alg=hmac-sha512&zone=Example.Test")
	if err != nil {
		t.Fatal(err)
	}
	want := rfc2136.Provider{Server: "127.0.0.1:5353", KeyName: "berth-key.", Secret: "c2VjcmV0+/8=", Alg: "hmac-sha512.", Zone: "example.test."}
	if *p != want {
		t.Fatalf("Parse = %+v, want %+v", *p, want)
	}
	if strings.Contains(p.String(), p.Secret) {
		t.Errorf("String() shows the secret: %s", p)
	}
	p, err = rfc2136.Parse("rfc2136://k:c2VjcmV0@ns.example.test")
	if err != nil {
		t.Fatal(err)
	}
	if p.Server != "ns.example.test:53" || p.Alg != "hmac-sha256." || p.Zone != "" {
		t.Errorf("defaults: %+v", *p)
	}
	for spec, part := range map[string]string{
		"dns://k:c2VjcmV0@127.0.0.1":                "rfc2136://",
		"rfc2136://127.0.0.1:53":                    "<tsig-key-name>:<secret>@",
		"rfc2136://k@127.0.0.1":                     "missing its secret",
		"rfc2136://k:not-base64!@127.0.0.1":         "not base64",
		"rfc2136://k:c2VjcmV0@":                     "server address",
		"rfc2136://k:c2VjcmV0@127.0.0.1?alg=md5":    "alg=md5",
		"rfc2136://k:c2VjcmV0@127.0.0.1?zone=a..b":  "zone=a..b",
		"rfc2136://k:c2VjcmV0@127.0.0.1?color=blue": `"color"`,
		"rfc2136://:c2VjcmV0@127.0.0.1":             "key name",
	} {
		_, err := rfc2136.Parse(spec)
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("Parse(%q) = %v, want an error naming %q", spec, err, part)
		}
		if err != nil && strings.Contains(err.Error(), "c2VjcmV0") {
			t.Errorf("Parse(%q) error shows the secret: %v", spec, err)
		}
	}
}

// TestUpdateAgainstBIND: records appended to one name accumulate (the two
// TXT values of a base + wildcard order), deletion removes exactly the one
// given, the zone is found by SOA lookup when not configured, and a wrong
// TSIG secret is refused.
func TestUpdateAgainstBIND(t *testing.T) {
	srv := bindtest.Start(t, "example.test.")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := rfc2136.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	rec := func(v string) libdns.Record {
		return libdns.TXT{Name: "_acme-challenge.app", Text: v, TTL: 30 * time.Second}
	}
	if _, err := p.AppendRecords(ctx, "example.test.", []libdns.Record{rec("one")}); err != nil {
		t.Fatal(err)
	}
	got, err := p.AppendRecords(ctx, "example.test.", []libdns.Record{rec("two")})
	if err != nil {
		t.Fatal(err)
	}
	if txt, ok := got[0].(libdns.TXT); !ok || txt.Text != "two" || txt.Name != "_acme-challenge.app" {
		t.Errorf("AppendRecords returned %#v", got)
	}
	name := "_acme-challenge.app.example.test."
	if v := srv.TXT(t, name); !sameSet(v, "one", "two") {
		t.Fatalf("after two appends TXT = %q, want one and two", v)
	}
	if _, err := p.DeleteRecords(ctx, "example.test.", []libdns.Record{rec("one")}); err != nil {
		t.Fatal(err)
	}
	if v := srv.TXT(t, name); !sameSet(v, "two") {
		t.Fatalf("after deleting one TXT = %q, want two", v)
	}

	// zone found by SOA lookup; the caller's zone is only what names are relative to
	found := *p
	found.Zone = ""
	if _, err := found.DeleteRecords(ctx, "app.example.test.", []libdns.Record{libdns.TXT{Name: "_acme-challenge", Text: "two"}}); err != nil {
		t.Fatal(err)
	}
	if v := srv.TXT(t, name); len(v) != 0 {
		t.Fatalf("after deleting two TXT = %q, want none", v)
	}

	bad := *p
	bad.Secret = "d3Jvbmcgc2VjcmV0"
	if _, err := bad.AppendRecords(ctx, "example.test.", []libdns.Record{rec("x")}); err == nil {
		t.Fatal("an UPDATE signed with the wrong secret succeeded")
	}
	if _, err := p.AppendRecords(ctx, "example.test.", []libdns.Record{libdns.TXT{Name: "x.elsewhere.test.", Text: "x"}}); err == nil || !strings.Contains(err.Error(), "not in zone") {
		t.Fatalf("a record outside the zone: %v", err)
	}
}

func sameSet(got []string, want ...string) bool {
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// FuzzParse: no flag value panics Parse, and an error never repeats the
// secret of a well-formed key.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"rfc2136://k:c2VjcmV0@127.0.0.1:53?alg=hmac-sha256&zone=example.test.",
		"rfc2136://k:c2VjcmV0@[::1]:53", "rfc2136://@", "rfc2136://a:b@c?zone=&alg=", "rfc2136://%zz:%zz@x",
		"rfc2136://k:c2VjcmV0@127.0.0.1?timeout=-1s", "rfc2136://k:c2VjcmV0@h:p:q",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		p, err := rfc2136.Parse(spec)
		if err == nil && (p.Server == "" || p.KeyName == "" || p.Secret == "" || p.Alg == "") {
			t.Fatalf("Parse(%q) = %+v without an error", spec, *p)
		}
	})
}
