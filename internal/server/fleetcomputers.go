package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype/computertype"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/computerapi"
	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/hop"
	"github.com/berth-dev/berth/internal/web"
)

// Computers across the hosts of a fleet.
//
// Computer ids are fleet-unique: a host claims an id in the fleet's
// Computer index (etcdfleet's computerhosts/<id>) after the caller is
// authenticated and before the manager creates the Computer, and
// releases the claim when it deletes it (fleetComputerManager). Ids are
// host-wide, not per namespace (the manager's Get takes no namespace),
// so the index is keyed by id alone, and an id another host holds is
// answered exactly as a duplicate on this host is (409 "Computer %q
// already exists"), whichever namespace holds it: the same answer a
// single host gives today, naming neither the host nor the namespace.
//
// Any host answers for any Computer (computerRouter): a request on a
// Computer the index places on another host goes over the hop to that
// host's admin API, which authenticates the caller itself; a create
// whose on-box-vm backing names another fleet host goes to that host; a
// list is this host's and every other live host's.

// fleetListTimeout bounds how long a list waits for each other host.
const fleetListTimeout = 3 * time.Second

// fleetComputerManager is the Computer manager of a fleet host: creates
// claim the id in the fleet's index first, deletes release it.
type fleetComputerManager struct {
	*computer.Manager
	m   *etcdfleet.Member
	log *slog.Logger
}

var _ computerapi.Manager = fleetComputerManager{}

func (f fleetComputerManager) Create(ctx context.Context, req computer.CreateRequest) (computer.Computer, error) {
	if err := f.checkHosts(ctx, req.Backings, false); err != nil {
		return computer.Computer{}, err
	}
	if req.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		req.ID = "c" + hex.EncodeToString(b[:])
	}
	if !claimableID(req.ID) {
		// The manager refuses it, naming the field; nothing to claim.
		return f.Manager.Create(ctx, req)
	}
	switch err := f.m.ClaimComputer(ctx, req.ID, req.Namespace); {
	case errors.Is(err, etcdfleet.ErrComputerClaimed):
		return computer.Computer{}, fmt.Errorf("%w: held by another host of the fleet", computer.ErrExists)
	case err != nil:
		return computer.Computer{}, fmt.Errorf("%w: the fleet's Computer index: %v", computer.ErrFleetUnavailable, err)
	}
	c, err := f.Manager.Create(ctx, req)
	if err != nil && !errors.Is(err, computer.ErrExists) {
		// Nothing was made: the id is free again. (A Computer of this id
		// that exists here keeps the claim: it is this host's.)
		if rerr := f.m.ReleaseComputer(context.WithoutCancel(ctx), req.ID); rerr != nil {
			f.log.Warn("fleet: releasing the claim of a Computer that was not created", "computer", req.ID, "err", rerr)
		}
	}
	return c, err
}

func (f fleetComputerManager) Delete(ctx context.Context, id string) error {
	err := f.Manager.Delete(ctx, id)
	if err == nil || errors.Is(err, computer.ErrNotFound) {
		if rerr := f.m.ReleaseComputer(context.WithoutCancel(ctx), id); rerr != nil {
			f.log.Warn("fleet: releasing a deleted Computer's claim; its id stays held by this host", "computer", id, "err", rerr)
		}
	}
	return err
}

func (f fleetComputerManager) SetBackings(ctx context.Context, id string, b []computer.Backing) (computer.Computer, error) {
	if err := f.checkHosts(ctx, b, true); err != nil {
		return computer.Computer{}, err
	}
	return f.Manager.SetBackings(ctx, id, b)
}

// checkHosts refuses an on-box-vm backing naming a host other than this
// one: an id that is no host of the fleet, or (for a Computer that
// exists, or a create this host was not routed) another host's.
func (f fleetComputerManager) checkHosts(ctx context.Context, bs []computer.Backing, existing bool) error {
	for i, b := range bs {
		if b.Kind != computer.KindVM || b.HostID == "" || b.HostID == computer.LocalHost || b.HostID == f.m.ID() {
			continue
		}
		field := fmt.Sprintf("backings[%d].hostId", i)
		hs, err := f.m.Hosts(ctx)
		if err != nil {
			return fmt.Errorf("%w: the fleet's hosts: %v", computer.ErrFleetUnavailable, err)
		}
		if !slices.ContainsFunc(hs, func(h etcdfleet.HostView) bool { return h.ID == b.HostID }) {
			return invalid422(field, "%q names no host of this fleet (GET /fleet/hosts lists them)", b.HostID)
		}
		if existing {
			return invalid422(field, "%q is another host: a Computer stays on the host that runs it (this is host %s)", b.HostID, f.m.ID())
		}
		return invalid422(field, "%q is another host, and this host cannot forward the create to it (no hop client: give the hosts fleet certificates)", b.HostID)
	}
	return nil
}

func invalid422(field, format string, args ...any) *web.Error {
	fe := &web.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	return &web.Error{Status: http.StatusUnprocessableEntity, Message: fe.Error(), Err: fe}
}

// claimableID is an id the manager would take (computer.validateID's
// rule); the claim is made only for those.
func claimableID(id string) bool {
	if id == "" || len(id) > computer.MaxIDLen || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// claimLocalComputers claims this host's Computers in the fleet's index
// (those made before the host joined a fleet, or before the index): an
// id another host holds as well is logged, and stays answered by the
// index's host through any other host.
func (s *Server) claimLocalComputers(ctx context.Context) {
	if s.fleetHost == nil {
		return
	}
	cs, err := s.computers.List(ctx, "")
	if err != nil {
		s.log.Warn("fleet: listing the Computers to claim their ids", "err", err)
		return
	}
	for _, c := range cs {
		err := s.fleetHost.m.ClaimComputer(ctx, c.ID, c.Namespace)
		switch {
		case errors.Is(err, etcdfleet.ErrComputerClaimed):
			s.log.Error("fleet: a Computer of this host has an id another host holds; the other hosts route it there", "computer", c.ID)
		case err != nil:
			s.log.Warn("fleet: claiming a Computer's id", "computer", c.ID, "err", err)
		}
	}
}

// computerRouter serves the Computer API of a fleet host: what another
// host holds goes there over the hop.
type computerRouter struct {
	local http.Handler
	m     *etcdfleet.Member
	fwd   *hop.AdminForwarder
	log   *slog.Logger
}

// fleetComputers is the Computer API handler local as this host serves
// it: itself without a fleet or without a hop client, else routed.
func (s *Server) fleetComputers(local http.Handler, ungated bool) http.Handler {
	if s.fleetHost == nil {
		return local
	}
	c := s.hopClient.Load()
	if c == nil {
		s.log.Info("fleet: no hop client; this host answers only for its own Computers")
		return local
	}
	t, err := hop.NewTransport(*c)
	if err != nil {
		s.log.Warn("fleet: no hop client; this host answers only for its own Computers", "err", err)
		return local
	}
	fwd := hop.NewAdminForwarder(t, s.fleetHost.m.ID(), 5*time.Second, s.log)
	fwd.SetUngated(ungated)
	return &computerRouter{local: local, m: s.fleetHost.m, fwd: fwd, log: s.log}
}

// hopUngated guards the admin requests other hosts forward to a host
// whose admin API has no operator password: such a host admits callers
// without a credential because they can only be local (package auth),
// and a caller another host forwards is local to it only when that host
// has no password either (hop.UngatedHeader). Any other such caller
// must present a credential (an app-token, which every host of a fleet
// on one store verifies, or a grant).
func hopUngated(gated bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fromUngated := r.Header.Get(hop.UngatedHeader) != ""
		r.Header.Del(hop.UngatedHeader)
		if !gated && !fromUngated && r.Header.Get("Authorization") == "" && r.URL.Query().Get("grant") == "" {
			web.WriteError(nil, w, r, &web.Error{Status: http.StatusUnauthorized, Code: "credential_required",
				Message: "this host's admin API has no operator password, and the request was forwarded from a host whose admin API has one: present an app-token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostRoutes are the Computer API's paths under /computers/ that name no
// Computer.
var hostRoutes = map[string]bool{"/computers/usage/pending": true, "/computers/usage/acknowledge": true, "/computers/hosts/capacity": true}

func (c *computerRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := hop.Origin(r.Context()); ok {
		// Sent here by another host: served here, never sent on.
		c.local.ServeHTTP(w, r)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/computers" && r.Method == http.MethodPost:
		c.create(w, r)
		return
	case p == "/computers" && r.Method == http.MethodGet:
		c.list(w, r)
		return
	case !strings.HasPrefix(p, "/computers/") || hostRoutes[p]:
		c.local.ServeHTTP(w, r)
		return
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(p, "/computers/"), "/")
	if !claimableID(id) {
		c.local.ServeHTTP(w, r)
		return
	}
	h, ok, err := c.m.ComputerHost(r.Context(), id)
	if err != nil {
		// The index is unreadable: what this host holds, it still serves.
		c.log.Warn("fleet: reading the Computer index; answering from this host", "computer", id, "err", err)
	}
	if err != nil || !ok || h.Host == c.m.ID() {
		c.local.ServeHTTP(w, r)
		return
	}
	c.forward(w, r, h.Host)
}

// forward relays r to host id's admin API.
func (c *computerRouter) forward(w http.ResponseWriter, r *http.Request, id string) {
	hs, err := c.m.Hosts(r.Context())
	if err != nil {
		c.fwd.Unreachable(w, r, id, err)
		return
	}
	i := slices.IndexFunc(hs, func(h etcdfleet.HostView) bool { return h.ID == id })
	if i < 0 || hs[i].HopAddress == "" {
		c.fwd.Unreachable(w, r, id, errors.New("not registered in the fleet with a hop listener"))
		return
	}
	c.fwd.ForwardAdmin(w, r, id, hs[i].HopAddress)
}

// maxCreateBody bounds the create body the router reads to find its
// backings (the API's own bound applies after).
const maxCreateBody = 1 << 20

// create sends a create whose on-box-vm backing names another fleet host
// to that host; every other create is this host's (whose manager claims
// the id, or refuses a hostId that names no host of the fleet).
func (c *computerRouter) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCreateBody+1))
	r.Body.Close()
	if err != nil {
		web.WriteError(c.log, w, r, web.Errorf(http.StatusBadRequest, "reading the request body: %v", err))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	var req struct {
		Backings []struct {
			Kind   string `json:"kind"`
			HostID string `json:"hostId"`
		} `json:"backings"`
	}
	if len(body) > maxCreateBody || json.Unmarshal(body, &req) != nil {
		c.local.ServeHTTP(w, r) // the API answers what is wrong with it
		return
	}
	target, at := "", -1
	for i, b := range req.Backings {
		if b.Kind != computer.KindVM || b.HostID == "" || b.HostID == computer.LocalHost {
			continue
		}
		if target == "" {
			target, at = b.HostID, i
			continue
		}
		if b.HostID != target {
			web.WriteError(c.log, w, r, invalid422(fmt.Sprintf("backings[%d].hostId", i),
				"%q is another host than backings[%d]'s %q: a Computer lives on one host", b.HostID, at, target))
			return
		}
	}
	if target == "" || target == c.m.ID() {
		c.local.ServeHTTP(w, r)
		return
	}
	hs, err := c.m.Hosts(r.Context())
	if err != nil {
		c.fwd.Unreachable(w, r, target, err)
		return
	}
	if !slices.ContainsFunc(hs, func(h etcdfleet.HostView) bool { return h.ID == target }) {
		// No such host: this host's API refuses it once the caller is
		// authenticated (fleetComputerManager.checkHosts), so the fleet's
		// host names are no answer to a stranger.
		c.local.ServeHTTP(w, r)
		return
	}
	c.forward(w, r, target)
}

// list is this host's list and every other live host's, by id. A host
// that does not answer in fleetListTimeout is left out (and logged: the
// list has no place to say so).
func (c *computerRouter) list(w http.ResponseWriter, r *http.Request) {
	rec := &bufferedResponse{header: http.Header{}}
	c.local.ServeHTTP(rec, r)
	if rec.code != http.StatusOK {
		rec.copyTo(w)
		return
	}
	var out computertype.ComputerList
	if err := json.Unmarshal(rec.body.Bytes(), &out); err != nil {
		rec.copyTo(w)
		return
	}
	hs, err := c.m.Hosts(r.Context())
	if err != nil {
		c.log.Warn("fleet: listing the hosts for a Computer list; only this host's Computers are listed", "err", err)
		rec.copyTo(w)
		return
	}
	type part struct {
		host string
		cs   []computertype.Computer
		err  error
	}
	parts := make(chan part)
	n := 0
	for _, h := range hs {
		if h.ID == c.m.ID() || h.HopAddress == "" {
			continue
		}
		n++
		go func() {
			ctx, cancel := context.WithTimeout(r.Context(), fleetListTimeout)
			defer cancel()
			resp, err := c.fwd.Send(r.WithContext(ctx), h.ID, h.HopAddress)
			if err != nil {
				parts <- part{host: h.ID, err: err}
				return
			}
			defer resp.Body.Close()
			var l computertype.ComputerList
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("answered %s", resp.Status)
			} else {
				err = json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&l)
			}
			parts <- part{host: h.ID, cs: l.Computers, err: err}
		}()
	}
	for range n {
		p := <-parts
		if p.err != nil {
			c.log.Warn("fleet: a host's Computers are left out of a list", "host", p.host, "err", p.err)
			continue
		}
		out.Computers = append(out.Computers, p.cs...)
	}
	slices.SortStableFunc(out.Computers, func(a, b computertype.Computer) int { return strings.Compare(a.ID, b.ID) })
	out.Computers = slices.CompactFunc(out.Computers, func(a, b computertype.Computer) bool { return a.ID == b.ID })
	web.WriteJSON(w, http.StatusOK, out)
}

// bufferedResponse is an http.ResponseWriter that keeps the answer.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferedResponse) copyTo(w http.ResponseWriter) {
	for k, vs := range b.header {
		w.Header()[k] = vs
	}
	w.WriteHeader(max(b.code, http.StatusOK))
	w.Write(b.body.Bytes())
}
