package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/egress"
	"github.com/berth-dev/berth/internal/grant"
	"github.com/berth-dev/berth/internal/hostnet"
)

// openEgress binds the Computers' egress proxy (Options.EgressAddr) and
// wires it to the grants (whose egress policies it enforces) and to the
// Computers' fact logs (where its egress facts go).
//
// Its credential key is derived from the grant signing key: proxy
// credentials name grants, so they stand and fall with them (replacing
// grant.key invalidates both), and they survive restarts as the grants
// do.
func (s *Server) openEgress(grants *grant.Issuer, grantKey []byte, gnet *hostnet.Network) error {
	addr := s.o.EgressAddr
	switch addr {
	case "off":
		return nil
	case "":
		addr = "127.0.0.1:0"
		if gnet != nil {
			// Containers and VMs reach the host at the bridge's gateway;
			// host processes reach that address as well.
			addr = netip.AddrPortFrom(gnet.Config().Gateway(), 0).String()
		}
	}
	var ln net.Listener
	var err error
	if s.o.EgressAddr == "" {
		ln, err = listenRemembered(addr, filepath.Join(s.o.DataDir, egressPortFile))
	} else {
		ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		return fmt.Errorf("egress proxy listener: %w", err)
	}
	m := hmac.New(sha256.New, grantKey)
	m.Write([]byte("berth-egress-proxy-key-v1"))
	log := s.log.With("component", "egress")
	p, err := egress.New(egress.Options{
		Key:  m.Sum(nil),
		Addr: ln.Addr().String(),
		Grant: func(computerID, id string) (egress.Grant, error) {
			g, err := grants.Lookup(computerID, id)
			return egress.Grant{Egress: g.Egress, Provenance: egress.Provenance{Actor: g.Provenance.Actor, Via: g.Provenance.Via}}, err
		},
		Record: func(ctx context.Context, e egress.Event) {
			f := computer.Fact{
				Kind: computer.FactEgress, ComputerID: e.ComputerID, Host: e.Host, Method: e.Method, Status: e.Status,
				Provenance: computer.Provenance{Actor: e.Provenance.Actor, Via: e.Provenance.Via},
			}
			if err := s.computers.Emit(ctx, f); err != nil {
				log.Warn("could not record an egress fact", "computer", e.ComputerID, "host", e.Host, "err", err)
			}
		},
		Log: log,
	})
	if err != nil {
		ln.Close()
		return err
	}
	s.egress, s.egressLn = p, ln
	s.log.Info("egress proxy listening", "addr", ln.Addr().String())
	return nil
}

// egressPortFile remembers, in the data directory, the port the egress
// proxy got by default, so that a restarted berth listens on the same one:
// the port is written into the proxy variables of the commands Computers
// run, and background processes keep their way out across restarts.
const egressPortFile = "egress-port"

// listenRemembered listens on addr (port 0) at the port remembered in
// file when it is free, else on a new one, and remembers that.
func listenRemembered(addr, file string) (net.Listener, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(file); err == nil {
		if port, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 16); err == nil && port != 0 {
			if ln, err := net.Listen("tcp", netip.AddrPortFrom(ap.Addr(), uint16(port)).String()); err == nil {
				return ln, nil
			}
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	// Losing the file only costs the port at the next start.
	if err := os.WriteFile(file, []byte(strconv.Itoa(port)+"\n"), 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// closeEgress stops the egress proxy, if any, and its listener.
func (s *Server) closeEgress() {
	if s.egress != nil {
		s.egress.Close()
	}
	if s.egressLn != nil {
		s.egressLn.Close()
	}
}

// EgressAddr is the bound address of the Computers' egress proxy, or ""
// when it is off.
func (s *Server) EgressAddr() string {
	if s.egressLn == nil {
		return ""
	}
	return s.egressLn.Addr().String()
}
