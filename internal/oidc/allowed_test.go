package oidc_test

import (
	"errors"
	"testing"

	"github.com/berth-dev/berth/internal/oidc"
)

func TestAllowed(t *testing.T) {
	alice := oidc.Identity{Subject: "1", Email: "Alice@Example.org", EmailVerified: true}
	aliceHD := alice
	aliceHD.HostedDomain = "example.org"
	unverified := alice
	unverified.EmailVerified = false
	unverifiedHD := aliceHD
	unverifiedHD.EmailVerified = false
	gmail := oidc.Identity{Subject: "2", Email: "bob@gmail.com", EmailVerified: true}
	noEmail := oidc.Identity{Subject: "3"}

	for _, c := range []struct {
		name    string
		id      oidc.Identity
		google  bool
		domains []string
		emails  []string
		ok      bool
		msg     string // the error's message, when not ok and not ""
	}{
		{"email", alice, false, nil, []string{"alice@example.org"}, true, ""},
		{"email case", alice, false, nil, []string{"ALICE@EXAMPLE.ORG"}, true, ""},
		{"email other", alice, false, nil, []string{"bob@example.org"}, false, "Alice@Example.org is not allowed to sign in here"},
		{"domain from email", alice, false, []string{"example.org"}, nil, true, ""},
		{"domain case", alice, false, []string{"EXAMPLE.ORG"}, nil, true, ""},
		{"domain leading @", alice, false, []string{"@example.org"}, nil, true, ""},
		{"domain not a parent", alice, false, []string{"org"}, nil, false, ""},
		{"subdomain not admitted", alice, false, []string{"eng.example.org"}, nil, false, ""},
		{"lists OR'd: email", alice, false, []string{"other.org"}, []string{"alice@example.org"}, true, ""},
		{"lists OR'd: domain", alice, false, []string{"example.org"}, []string{"bob@other.org"}, true, ""},
		{"star", alice, false, []string{"*"}, nil, true, ""},
		{"star among others", gmail, true, []string{"example.org", "*"}, nil, true, ""},
		{"star admits unverified", unverified, false, []string{"*"}, nil, true, ""},
		{"star admits no email", noEmail, false, []string{"*"}, nil, true, ""},
		{"unverified email", unverified, false, nil, []string{"alice@example.org"}, false, "Alice@Example.org is not allowed to sign in here: the identity provider has not verified this email address"},
		{"unverified domain", unverified, false, []string{"example.org"}, nil, false, ""},
		{"google hd", aliceHD, true, []string{"example.org"}, nil, true, ""},
		{"google hd unverified", unverifiedHD, true, []string{"example.org"}, nil, false, ""},
		{"google: email domain is not hd", alice, true, []string{"example.org"}, nil, false, ""},
		{"google consumer account by domain", gmail, true, []string{"gmail.com"}, nil, false, "bob@gmail.com is not allowed to sign in here"},
		{"google consumer account by email", gmail, true, nil, []string{"bob@gmail.com"}, true, ""},
		{"other issuer ignores hd", oidc.Identity{Email: "a@other.org", EmailVerified: true, HostedDomain: "example.org"}, false, []string{"example.org"}, nil, false, ""},
		{"no email", noEmail, false, []string{"example.org"}, []string{"a@example.org"}, false, "the account 3 is not allowed to sign in here"},
		{"empty lists", alice, false, nil, nil, false, "Alice@Example.org is not allowed to sign in here: this gate admits no one (its allow-lists are empty)"},
	} {
		err := oidc.Allowed(c.id, c.google, c.domains, c.emails)
		if c.ok != (err == nil) {
			t.Errorf("%s: Allowed = %v, want ok=%v", c.name, err, c.ok)
			continue
		}
		if err == nil {
			continue
		}
		var na *oidc.NotAllowedError
		if !errors.As(err, &na) {
			t.Errorf("%s: %T, want *NotAllowedError", c.name, err)
		}
		if c.msg != "" && err.Error() != c.msg {
			t.Errorf("%s: message %q, want %q", c.name, err, c.msg)
		}
	}
}

func TestCheckAllowLists(t *testing.T) {
	for _, c := range []struct {
		domains, emails []string
		field           string
	}{
		{[]string{"example.org"}, nil, ""},
		{[]string{"@example.org", "*"}, nil, ""},
		{nil, []string{"a@example.org"}, ""},
		{nil, nil, "allowed_domains"},
		{[]string{"example.org", ""}, nil, "allowed_domains[1]"},
		{[]string{"a@example.org"}, nil, "allowed_domains[0]"},
		{[]string{"*.example.org"}, nil, "allowed_domains[0]"},
		{[]string{"example..org"}, nil, "allowed_domains[0]"},
		{nil, []string{"example.org"}, "allowed_emails[0]"},
		{nil, []string{"a@b@example.org"}, "allowed_emails[0]"},
		{nil, []string{"a@"}, "allowed_emails[0]"},
	} {
		err := oidc.CheckAllowLists(c.domains, c.emails)
		var fe *oidc.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%v %v: %v", c.domains, c.emails, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%v %v: got %v, want an error in %s", c.domains, c.emails, err, c.field)
		}
	}
}
