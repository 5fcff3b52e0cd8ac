package agent

import (
	"reflect"
	"syscall"
	"testing"
)

// TestParseUser: --user takes UID:GID and UID:GID:G1,G2 (what
// vm.User.AgentFlag writes), and nothing else.
func TestParseUser(t *testing.T) {
	for v, want := range map[string]syscall.Credential{
		"1000:1000":        {Uid: 1000, Gid: 1000, Groups: []uint32{}},
		"0:0":              {Uid: 0, Gid: 0, Groups: []uint32{}},
		"1001:1002:1003,4": {Uid: 1001, Gid: 1002, Groups: []uint32{1003, 4}},
	} {
		c, err := parseUser(v)
		if err != nil || !reflect.DeepEqual(c, want) {
			t.Errorf("parseUser(%q) = %+v, %v; want %+v", v, c, err, want)
		}
	}
	for _, bad := range []string{"", "1000", "app", "1000:", "1:2:", "1:2:x", "-1:2", "1:2:3:4", "4294967296:1"} {
		if c, err := parseUser(bad); err == nil {
			t.Errorf("parseUser(%q) = %+v, want an error", bad, c)
		}
	}
}
