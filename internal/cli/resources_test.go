package cli

import (
	"strings"
	"testing"
)

// TestGrammarLive: get|describe|delete KIND [NAME] for every kind, with
// plural, singular, short and KIND/NAME forms, against a real server; the
// older verbs print the same (issue 10 §4).
func TestGrammarLive(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	srv := liveServer(t)
	op := []string{"--server", srv, "--password", "opw"}
	run := func(args ...string) string { t.Helper(); return mustRun(t, "", append(op, args...)...) }

	// berth get alone lists the kinds.
	out := run("get")
	for _, k := range []string{"deployments", "vms", "secrets", "namespaces", "tokens", "images", "computers", "deploy"} {
		if !strings.Contains(out, k) {
			t.Errorf("berth get does not list %s:\n%s", k, out)
		}
	}

	mustRun(t, `{"id":"web","routes":[{"host":"web.test"}],"upstreams":["127.0.0.1:1"]}`, append(op, "apply", "-f", "-")...)
	for _, args := range [][]string{{"get", "deploy"}, {"get", "deployments"}, {"get", "deployment", "web"}, {"get", "deploy/web"}} {
		if out := run(args...); !strings.Contains(out, "web") || !strings.Contains(out, "NAME") {
			t.Errorf("%v: %q", args, out)
		}
	}

	// Tokens: get, describe, delete (= revoke), and the old verbs.
	tok := strings.TrimSpace(run("token", "mint", "ci", "--admin", "view", "--all-deployments"))
	if !strings.HasPrefix(tok, "berth_") {
		t.Fatalf("mint: %q", tok)
	}
	list := run("get", "tokens")
	if old := run("token", "list"); old != list || !strings.Contains(list, "ci") {
		t.Errorf("get tokens:\n%s\ntoken list:\n%s", list, old)
	}
	id := strings.TrimPrefix(strings.TrimSpace(run("get", "tokens", "-o", "name")), "token/")
	if one := run("get", "token", id); !strings.Contains(one, id) || strings.Count(one, "\n") != 2 {
		t.Errorf("get token %s: %q", id, one)
	}
	if d := run("describe", "token/"+id); !strings.Contains(d, "name:") || !strings.Contains(d, "ci") || strings.Contains(d, tok) {
		t.Errorf("describe token: %q", d)
	}
	if code, _, errs := berth(t, "", append(op, "get", "token", "nope")...); code != 1 || !strings.Contains(errs, `no token "nope"`) {
		t.Errorf("get token nope: exit %d, %q", code, errs)
	}
	if got := run("delete", "token", id); got != "token/"+id+" revoked\n" {
		t.Errorf("delete token: %q", got)
	}
	if code, _, _ := berth(t, "", "--server", srv, "--token", tok, "whoami"); code != 1 {
		t.Error("delete token did not revoke it")
	}

	// Secrets and namespaces describe.
	run("create", "secret", "db", "password=s3cr3t")
	if d := run("describe", "secret", "db"); !strings.Contains(d, "keys:") || !strings.Contains(d, "password") || strings.Contains(d, "s3cr3t") {
		t.Errorf("describe secret: %q", d)
	}
	if d := run("describe", "ns", "default"); !strings.Contains(d, "namespace:") || !strings.Contains(d, "deployments:") {
		t.Errorf("describe ns default: %q", d)
	}

	// Certificates: none on a server without HTTPS.
	if code, out, errs := berth(t, "", append(op, "get", "certs")...); code != 0 || out != "" || !strings.Contains(errs, "No certificates found.") {
		t.Errorf("get certs: exit %d, %q, %q", code, out, errs)
	}

	// Usage errors name the kinds.
	for _, args := range [][]string{{"get", "frobs"}, {"describe"}, {"delete", "widget", "x"}} {
		code, _, errs := berth(t, "", append(op, args...)...)
		if code != 2 || !strings.Contains(errs, "deployments, vms, secrets, namespaces, tokens, images, certs, alerts, rules, computers") {
			t.Errorf("%v: exit %d, %q", args, code, errs)
		}
	}
	run("delete", "deploy/web")
	if out := run("get", "deployments", "-o", "name"); out != "" {
		t.Errorf("after delete deploy/web: %q", out)
	}
}

// TestGrammarImages: get/describe/delete image against the image routes,
// the same as image list/delete.
func TestGrammarImages(t *testing.T) {
	srv, _ := imageServer(t)
	list := run(t, srv, "", "get", "images")
	if old := run(t, srv, "", "image", "list"); list.code != 0 || list.stdout != old.stdout || !strings.Contains(list.stdout, "tiny") {
		t.Errorf("get images %+v, image list %+v", list, old)
	}
	if r := run(t, srv, "", "get", "image", "tiny", "-o", "json"); r.code != 0 || !strings.HasPrefix(r.stdout, "{") || !strings.Contains(r.stdout, `"name": "tiny"`) {
		t.Errorf("get image tiny -o json: %+v", r)
	}
	if r := run(t, srv, "", "get", "images", "-o", "name"); r.stdout != "image/tiny\n" {
		t.Errorf("get images -o name: %+v", r)
	}
	if r := run(t, srv, "", "describe", "image/tiny"); r.code != 0 || !strings.Contains(r.stdout, "digest:") || !strings.Contains(r.stdout, "references:") {
		t.Errorf("describe image: %+v", r)
	}
	if r := run(t, srv, "", "delete", "img", "heyo/alpine:3.24"); r.code != 0 || r.stdout != "image/heyo/alpine:3.24 deleted\n" {
		t.Errorf("delete img: %+v", r)
	}
}

// TestGrammarComputers: get/describe/delete computer against a real
// server, the same as computer list/get/delete.
func TestGrammarComputers(t *testing.T) {
	srv := computerServer(t)
	op := func(args ...string) []string {
		return append([]string{"--server", srv, "--user", "admin", "--password", "opw"}, args...)
	}
	mustRun(t, "", op("computer", "create", "desk")...)
	if out := mustRun(t, "", op("get", "computers", "-o", "name")...); out != "computer/desk\n" {
		t.Errorf("get computers -o name: %q", out)
	}
	if a, b := mustRun(t, "", op("get", "computer", "desk", "-o", "json")...), mustRun(t, "", op("computer", "get", "desk", "-o", "json")...); a != b {
		t.Errorf("get computer desk:\n%s\ncomputer get desk:\n%s", a, b)
	}
	if d := mustRun(t, "", op("describe", "computer", "desk")...); !strings.Contains(d, "id:") || !strings.Contains(d, "desk") {
		t.Errorf("describe computer: %q", d)
	}
	if out := mustRun(t, "", op("delete", "computer/desk")...); out != "computer/desk deleted\n" {
		t.Errorf("delete computer/desk: %q", out)
	}
	if out := mustRun(t, "", op("computer", "list", "-o", "json")...); strings.TrimSpace(out) != "[]" {
		t.Errorf("after delete: %q", out)
	}
}
