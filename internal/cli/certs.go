package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/berth-dev/berth/apitype"
)

// listCerts prints the certificates the server holds (`get certs`), and
// after them the routed hosts that have none yet, with why.
func (e *env) listCerts(ctx context.Context, host string) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printItem(ctx, c, "/certs", "", "cert", "host", host)
	}
	certs, err := c.Certs(ctx)
	if err != nil {
		return err
	}
	pending, err := c.PendingCerts(ctx)
	if err != nil {
		return err
	}
	if host != "" {
		certs = slices.DeleteFunc(certs, func(s apitype.CertStatus) bool { return s.Host != host })
		pending = slices.DeleteFunc(pending, func(p apitype.CertPending) bool { return p.Host != host })
		if len(certs) == 0 && len(pending) == 0 {
			return fmt.Errorf("no certificate for %q, and no deployment routes it", host)
		}
	}
	if len(certs) == 0 && len(pending) == 0 {
		fmt.Fprintln(e.stderr, "No certificates found.")
		return nil
	}
	tw := newTable(e.stdout)
	if len(certs) > 0 {
		row(tw, "HOST", "NOT-AFTER", "ISSUER", "NEEDS-RENEWAL")
		for _, s := range certs {
			row(tw, s.Host, s.NotAfter, orDash(s.Issuer), s.NeedsRenewal)
		}
	}
	if len(pending) > 0 {
		if len(certs) > 0 {
			row(tw)
		}
		row(tw, "WITHOUT-CERT", "STATE", "RETRY-AT", "FAILURES", "LAST-ERROR")
		for _, p := range pending {
			retry := "-"
			if p.RetryAt > 0 {
				retry = stamp(&p.RetryAt)
			}
			row(tw, p.Host, p.State, retry, strconv.Itoa(p.Failures), orDash(p.LastError))
		}
	}
	return tw.Flush()
}
