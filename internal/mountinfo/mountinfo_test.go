package mountinfo

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := `36 35 98:0 /mnt1 /mnt\040two rw,noatime master:1 - ext3 /dev/root rw,errors=continue
40 20 0:50 / /data/r/rootfs rw,nodev - overlay overlay rw,lowerdir=/img/sha256/ab/rootfs,upperdir=/data/r/upper,workdir=/data/r/work
bad line
`
	ms, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("%d mounts, want 2: %+v", len(ms), ms)
	}
	if m := ms[0]; m.Root != "/mnt1" || m.Point != "/mnt two" || m.FSType != "ext3" || m.Source != "/dev/root" {
		t.Errorf("first: %+v", m)
	}
	if low, ok := ms[1].Option("lowerdir"); !ok || low != "/img/sha256/ab/rootfs" {
		t.Errorf("lowerdir = %q, %v", low, ok)
	}
	if _, ok := ms[1].Option("nope"); ok {
		t.Error("an absent option was found")
	}
	if got := Unescape(`a\134b\040c\9x\04`); got != `a\b c\9x\04` {
		t.Errorf("Unescape = %q", got)
	}
}
