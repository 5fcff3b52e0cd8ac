package fleetca

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const usage = `Usage:
  berth fleet init [--data-dir DIR] --advertise HOST:PORT [--peer-advertise HOST:PORT]
                   [--server URL] [--host-id ID] [--token-ttl 1h]
      On the fleet's first host: make the fleet CA and this host's etcd
      certificate in <data-dir>/fleet, so that berth serve on DIR runs an
      embedded etcd member on HOST:PORT (peers on HOST:PORT+1) with client
      certificates required, and print a join command with a one-time
      token. Run again to print a new join command (one per host); it
      also renews this host's certificate when less than a third of its
      lifetime is left. The CA key is sealed with berth's secret key, as
      berth serve loads it: BERTH_SECRET_KEY, or <data-dir>/secret.key.
  berth fleet join --server URL --token TOKEN --ca-sha256 FINGERPRINT
                   [--data-dir DIR] [--host-id ID] [--force]
      On a new host: get a host certificate of the fleet CA for a key
      made here (it never leaves the host), so that berth serve on DIR
      joins the fleet over mutual TLS with no further flags, and the
      fleet's secret key, kept as <data-dir>/secret.key. The token never
      crosses the wire: the request carries a MAC under it and the answer
      is sealed with it, so plain HTTP is safe. A data dir holding another
      secret key is refused (--force replaces it: what was sealed with it
      no longer opens); BERTH_SECRET_KEY, when set, must be the fleet's.
  berth fleet renew [--data-dir DIR] [--server URL]
      On a joined host: renew its certificate before it expires, with no
      join token: a new key made here, signed by the first host on proof
      of the current, still valid certificate (POST /fleet/renew). The
      server is the one joined through, kept in fleet.json. Restart berth
      serve to use the new certificate.
  berth fleet revoke [--data-dir DIR] [--reason TEXT] HOST-ID
      On the fleet's first host: revoke every certificate the fleet CA
      issued to HOST-ID (recorded in <data-dir>/fleet/issued.json) and
      write the CRL, signed by the CA, to <data-dir>/fleet/crl.pem (and
      crl.der, the DER etcd reads). The embedded etcd member refuses the
      host's new connections at once; berth serve on this data dir
      publishes the CRL in etcd within seconds, and every host's hop
      refuses the host from then on; its renewals are refused. The host
      can come back only by joining again with a new token. The running
      berth does the same on POST /fleet/hosts/ID/revoke.
  berth fleet status [--data-dir DIR]
      Print the fleet configuration and its certificates' expiry.
`

// Main runs berth fleet ARGS; it needs no running server except for join.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		io.WriteString(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	fs := flag.NewFlagSet("berth fleet "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { io.WriteString(stderr, usage) }
	def := os.Getenv("BERTH_DATA_DIR")
	if def == "" {
		def = "./berth-data"
	}
	dataDir := fs.String("data-dir", def, "berth's data directory, as berth serve --data-dir (BERTH_DATA_DIR)")
	hostID := fs.String("host-id", "", "this host's id in the fleet; default the one kept in <data-dir>/host-id, made on first use")
	var run func() error
	// positional: the command takes one argument (revoke's HOST-ID),
	// flags before or after it.
	var positional bool
	var revokeID string
	switch args[0] {
	case "init":
		adv := fs.String("advertise", "", "HOST:PORT the other hosts reach this host's etcd member at (its client listener)")
		peer := fs.String("peer-advertise", "", "HOST:PORT of the member's peer listener; default HOST:PORT+1")
		server := fs.String("server", "", "this host's admin API URL as the joining hosts reach it, for the printed command; default http://HOST:9090")
		ttl := fs.Duration("token-ttl", TokenLifetime, "how long the join token is good for")
		run = func() error {
			if *ttl <= 0 {
				return errors.New("--token-ttl: want a positive duration")
			}
			r, err := Init(InitOptions{DataDir: *dataDir, Advertise: *adv, PeerAdvertise: *peer, HostID: *hostID, TokenTTL: *ttl, SecretKey: os.Getenv("BERTH_SECRET_KEY")})
			if err != nil {
				return err
			}
			// The admin URL given once is kept for the next tokens' commands
			// (berth fleet init again, for each further host).
			srvFile := filepath.Join(Dir(*dataDir), "join-server")
			srv := *server
			if srv != "" {
				if err := os.WriteFile(srvFile, []byte(srv+"\n"), 0o600); err != nil {
					return err
				}
			} else if b, err := os.ReadFile(srvFile); err == nil {
				srv = strings.TrimSpace(string(b))
			}
			if srv == "" {
				c, _, _ := LoadConfig(*dataDir)
				h := strings.TrimPrefix(c.Member.ClientURL, "https://")
				if i := strings.LastIndex(h, ":"); i >= 0 {
					h = h[:i]
				}
				srv = "http://" + h + ":9090"
			}
			if r.MigratedCAKey {
				fmt.Fprintf(stdout, "The fleet CA key %s was plaintext (as berth wrote it before sealing it): it is now sealed with this data dir's secret key (BERTH_SECRET_KEY or %s).\n", filepath.Join(Dir(*dataDir), CAKey), filepath.Join(*dataDir, "secret.key"))
			}
			if r.Renewed {
				fmt.Fprintf(stdout, "Renewed this host's certificate (%s), a server and client certificate naming its host id: restart berth serve on %s to use it.\n", filepath.Join(Dir(*dataDir), HostCert), *dataDir)
			}
			if r.Created {
				fmt.Fprintf(stdout, "Made the fleet CA and this host's etcd certificate in %s.\n", Dir(*dataDir))
				fmt.Fprintf(stdout, "Start this host with: berth serve --data-dir %s (its admin API reachable by the other hosts)\n", *dataDir)
			}
			fmt.Fprintf(stdout, "etcd endpoints: %s\nCA fingerprint: %s\n", strings.Join(r.Endpoints, ","), r.Pin)
			fmt.Fprintf(stdout, "On a new host, within %s (until %s), the token good for one host:\n\n", ttl.String(), r.Expires.Format(time.RFC3339))
			fmt.Fprintf(stdout, "  berth fleet join --server %s --token %s --ca-sha256 %s\n", srv, r.Token, r.Pin)
			return nil
		}
	case "join":
		server := fs.String("server", "", "the first host's admin API URL (printed by berth fleet init)")
		token := fs.String("token", "", "the one-time join token")
		pin := fs.String("ca-sha256", "", "the fleet CA's fingerprint: the CA the server returns must match it")
		force := fs.Bool("force", false, "replace the fleet configuration and a secret key other than the fleet's the data directory holds")
		run = func() error {
			r, err := Join(ctx, JoinOptions{DataDir: *dataDir, Server: *server, Token: *token, Pin: *pin, HostID: *hostID, Force: *force, SecretKey: os.Getenv("BERTH_SECRET_KEY")})
			if err != nil {
				return err
			}
			if r.ReplacedKey {
				fmt.Fprintf(stdout, "Replaced the secret key %s with the fleet's (--force): secrets and keys this data dir sealed with the old one no longer open.\n", r.KeyFile)
			}
			fmt.Fprintf(stdout, "The fleet's secret key is this host's: %s (keep it with the data dir's backup).\n", r.KeyFile)
			fmt.Fprintf(stdout, "Joined as host %s (certificate good until %s); etcd endpoints: %s\n", r.HostID, r.NotAfter.UTC().Format(time.RFC3339), strings.Join(r.Endpoints, ","))
			fmt.Fprintf(stdout, "Start this host with: berth serve --data-dir %s\n", *dataDir)
			return nil
		}
	case "renew":
		server := fs.String("server", "", "the first host's admin API URL; default the one this host joined through")
		run = func() error {
			r, err := Renew(ctx, RenewOptions{DataDir: *dataDir, Server: *server})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "Renewed the certificate of host %s (a new key; good until %s): restart berth serve on %s to use it.\n", r.HostID, r.NotAfter.UTC().Format(time.RFC3339), *dataDir)
			return nil
		}
	case "revoke":
		reason := fs.String("reason", "", "why, kept with the revocation")
		positional = true
		run = func() error {
			if revokeID == "" {
				return errors.New("HOST-ID is required: berth fleet revoke [--data-dir DIR] [--reason TEXT] HOST-ID")
			}
			key, err := LoadSecretKey(os.Getenv("BERTH_SECRET_KEY"), *dataDir)
			if err != nil {
				return err
			}
			r, err := Revoke(*dataDir, key, revokeID, *reason, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "Revoked host %s: %d certificate(s) (%d newly): %s\n", r.Host, len(r.Serials), r.Newly, strings.Join(r.Serials, ", "))
			fmt.Fprintf(stdout, "Wrote the CRL %s; berth serve on %s publishes it to the fleet's hosts.\n", filepath.Join(Dir(*dataDir), CRLFile), *dataDir)
			return nil
		}
	case "status":
		run = func() error {
			c, certs, err := Status(*dataDir)
			if err != nil {
				return err
			}
			role := "joined host"
			if c.Member != nil {
				role = "first host (fleet CA, embedded etcd member " + c.Member.ClientURL + ")"
			}
			fmt.Fprintf(stdout, "fleet:      %s\nrole:       %s\nendpoints:  %s\n", filepath.Join(Dir(*dataDir), ConfigFile), role, strings.Join(c.Endpoints, ","))
			for _, ci := range certs {
				fmt.Fprintf(stdout, "%-11s %s, %s, expires %s (in %d days)\n", filepath.Base(ci.Path)+":", ci.Path, ci.Subject, ci.NotAfter.UTC().Format(time.RFC3339), int(time.Until(ci.NotAfter).Hours()/24))
			}
			return nil
		}
	default:
		fmt.Fprintf(stderr, "berth fleet: unknown command %q\n", args[0])
		io.WriteString(stderr, usage)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if positional && fs.NArg() > 0 {
		revokeID = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "berth fleet %s: unexpected argument %q\n", args[0], fs.Arg(0))
		return 2
	}
	if abs, err := filepath.Abs(*dataDir); err == nil {
		*dataDir = abs
	}
	if err := run(); err != nil {
		fmt.Fprintf(stderr, "berth fleet %s: %s\n", args[0], strings.TrimPrefix(err.Error(), "fleetca: "))
		return 1
	}
	return 0
}
