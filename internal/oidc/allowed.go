package oidc

import "strings"

// NotAllowedError is a signed-in account that the allow-lists do not admit.
// Its message names the account: "alice@example.org is not allowed to sign
// in here", with why when the account would have matched but for an
// unverified email.
type NotAllowedError struct {
	Account string // the email, or "the account <sub>" when there is none
	Why     string // "" or the reason, in words
}

func (e *NotAllowedError) Error() string {
	if e.Why == "" {
		return e.Account + " is not allowed to sign in here"
	}
	return e.Account + " is not allowed to sign in here: " + e.Why
}

// Allowed applies a gate's allow-lists to id, and returns nil or a
// [*NotAllowedError].
//
//   - The lists are OR'd: a match in either admits.
//   - domains ["*"] (a "*" anywhere in it) admits any account the issuer
//     signed in, whatever its email and whether verified.
//   - Otherwise a match needs a verified email: email_verified true (or
//     "true"). An absent email_verified claim counts as unverified, so an
//     issuer that does not send it can only be opened with "*": berth does
//     not trust an address the issuer does not vouch for, since many
//     issuers let anyone type in any address.
//   - Emails match id.Email, case-insensitively.
//   - Domains match case-insensitively, a leading "@" tolerated, exactly
//     (example.org does not admit eng.example.org). For the google provider
//     the domain is the hd claim, so a consumer account (no hd) is admitted
//     only by its email; for any other issuer it is the domain of the
//     verified email.
//   - Empty lists admit no one.
func Allowed(id Identity, google bool, domains, emails []string) error {
	for _, d := range domains {
		if strings.TrimSpace(d) == "*" {
			return nil
		}
	}
	email := strings.TrimSpace(id.Email)
	domain := id.HostedDomain
	if !google {
		domain = ""
		if at := strings.LastIndexByte(email, '@'); at >= 0 {
			domain = email[at+1:]
		}
	}
	matched := false
	for _, e := range emails {
		if email != "" && strings.EqualFold(strings.TrimSpace(e), email) {
			matched = true
		}
	}
	for _, d := range domains {
		if domain != "" && strings.EqualFold(strings.TrimPrefix(strings.TrimSpace(d), "@"), domain) {
			matched = true
		}
	}
	account := email
	if account == "" {
		account = "the account " + id.Subject
	}
	switch {
	case matched && id.EmailVerified:
		return nil
	case matched:
		return &NotAllowedError{Account: account, Why: "the identity provider has not verified this email address"}
	case len(domains) == 0 && len(emails) == 0:
		return &NotAllowedError{Account: account, Why: "this gate admits no one (its allow-lists are empty)"}
	}
	return &NotAllowedError{Account: account}
}
