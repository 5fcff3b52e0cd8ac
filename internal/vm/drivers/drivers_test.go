package drivers

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/guest"
)

// closer records that it was closed.
type closer struct {
	closed *[]string
	name   string
}

func (c closer) Close() error { *c.closed = append(*c.closed, c.name); return nil }

// TestOpen checks how Open treats its factories: an unavailable driver
// (by its Check or its Open) is left out and the others open; a driver
// failing otherwise fails the whole, and what was opened is closed.
func TestOpen(t *testing.T) {
	var closed []string
	var opened []string
	ok := func(name string) Factory {
		return Factory{Name: name, Open: func(*Env) (vm.Driver, io.Closer, error) {
			opened = append(opened, name)
			return nil, closer{&closed, name}, nil
		}}
	}
	unavailableCheck := Factory{Name: "nocheck", Check: func(*Env) error { return guest.Unavailablef("no host") },
		Open: func(*Env) (vm.Driver, io.Closer, error) {
			t.Error("Open called after a failed Check")
			return nil, nil, nil
		}}
	unavailableOpen := Factory{Name: "noopen", Open: func(*Env) (vm.Driver, io.Closer, error) {
		return nil, nil, guest.Unavailablef("not today")
	}}
	ds, cs, err := open(Config{Log: slog.New(slog.DiscardHandler)}, []Factory{ok("a"), unavailableCheck, unavailableOpen, ok("b")})
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(maps.Keys(ds))
	if !slices.Equal(names, []string{"a", "b"}) || len(cs) != 2 {
		t.Errorf("opened %v with %d closers, want a and b with 2", names, len(cs))
	}

	broken := Factory{Name: "broken", Open: func(*Env) (vm.Driver, io.Closer, error) { return nil, nil, errors.New("disk on fire") }}
	closed = nil
	_, cs, err = open(Config{Log: slog.New(slog.DiscardHandler)}, []Factory{ok("a"), broken, ok("b")})
	if err == nil || !strings.Contains(err.Error(), "broken driver: disk on fire") || cs != nil {
		t.Errorf("open with a broken driver = %v, %d closers; want its error and none", err, len(cs))
	}
	if !slices.Equal(closed, []string{"a"}) {
		t.Errorf("closed %v after the failure, want what was opened before it: [a]", closed)
	}
}

// TestFactories checks that every driver berth documents has a factory,
// in the order they are opened: the process driver first.
func TestFactories(t *testing.T) {
	want := []string{"process", "container", "firecracker", "kvm", "libvirt"}
	var got []string
	for _, f := range factories {
		got = append(got, f.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("factories %v, want %v", got, want)
	}
}

// TestGuestAgentFallback checks the microVM guests' agent: GuestAgent,
// else the containers' agent, else the running berth.
func TestGuestAgentFallback(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{GuestAgent: "/g", ContainerAgent: "/c"}, "/g"},
		{Options{ContainerAgent: "/c"}, "/c"},
		{Options{}, ""},
	} {
		if got := tc.o.guestAgent(); got != tc.want {
			t.Errorf("%+v: guest agent %q, want %q", tc.o, got, tc.want)
		}
	}
}

// TestFirecrackerUnavailable checks that a host without KVM is told so,
// and before anything else Firecracker needs.
func TestFirecrackerUnavailable(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err == nil {
		t.Skip("this host has /dev/kvm")
	}
	err := firecrackerCheck(&Env{})
	if !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), "no KVM") {
		t.Errorf("firecrackerCheck = %v, want ErrUnavailable saying there is no KVM", err)
	}
}

// TestNoNetwork checks that the isolating drivers are left out, saying
// why, on a host without a guest network.
func TestNoNetwork(t *testing.T) {
	for _, f := range []Factory{containerFactory, kvmFactory, libvirtFactory} {
		err := f.Check(&Env{})
		if !errors.Is(err, vm.ErrUnavailable) {
			t.Errorf("%s: Check without a guest network = %v, want ErrUnavailable", f.Name, err)
		}
	}
}
