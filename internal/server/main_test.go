package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/fleet/etcdembed"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/etcdstore"
)

// TestMain lets the test binary play the parts a real deployment has: with
// BERTH_TEST_ROLE=agent it is the in-sandbox agent (berth agent), with
// BERTH_TEST_ROLE=app a small app serving $PORT, with
// BERTH_TEST_ROLE=lockholder a process holding $BERTH_TEST_DIR's instance
// lock until it is killed.
func TestMain(m *testing.M) {
	switch os.Getenv("BERTH_TEST_ROLE") {
	case "agent":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		os.Exit(agent.Main(ctx, os.Args[1:], os.Stderr))
	case "app":
		os.Exit(testApp())
	case "lockholder":
		os.Exit(holdLock(os.Getenv("BERTH_TEST_DIR")))
	}
	// The tests run in a network namespace of their own, so guest
	// networks (TestKVMGateway's bridge and taps) live only there.
	os.Exit(netnstest.Main(etcdStoreRunner{m}))
}

// testStoreEtcd, set by BERTH_TEST_STORE=etcd, are the client URLs of an
// etcd member every test server keeps its store in (each under a prefix
// of its own data dir), instead of SQLite: the server's tests then show
// the etcd backend behaves as the SQLite one does.
var testStoreEtcd []string

// etcdStoreRunner runs the tests, with an embedded etcd member for their
// stores under BERTH_TEST_STORE=etcd.
type etcdStoreRunner struct{ m *testing.M }

func (r etcdStoreRunner) Run() int {
	if os.Getenv("BERTH_TEST_STORE") != "etcd" {
		return r.m.Run()
	}
	if eps := os.Getenv("BERTH_TEST_STORE_ENDPOINTS"); eps != "" {
		// A child of a test (a berth killed -9 and started again): the
		// parent's member.
		testStoreEtcd = strings.Split(eps, ",")
		return r.m.Run()
	}
	dir, err := os.MkdirTemp("", "berth-test-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	e, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir, ClientURL: "http://127.0.0.1:23790", PeerURL: "http://127.0.0.1:23800", NoFsync: true, LogLevel: "fatal"})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "BERTH_TEST_STORE=etcd:", err)
		return 1
	}
	defer e.Close()
	testStoreEtcd = e.Endpoints()
	os.Setenv("BERTH_TEST_STORE_ENDPOINTS", strings.Join(testStoreEtcd, ","))
	return r.m.Run()
}

func testApp() int {
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	host, _ := os.Hostname()
	fmt.Println("test app listening")
	rev := os.Getenv("APP_REVISION")
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			// A websocket echoing each message with the revision that
			// answered it (a rollout test holds one across the switch).
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				typ, msg, err := c.Read(r.Context())
				if err != nil {
					return
				}
				if c.Write(r.Context(), typ, []byte(rev+":"+string(msg))) != nil {
					return
				}
			}
		}
		if rev != "" {
			w.Header().Set("X-Heyo-Revision", rev) // what a rollout's expected_header checks
		}
		fmt.Fprintf(w, "app %s %s %s", host, r.URL.Path, os.Getenv("GREETING"))
		if u := r.Header.Get("X-Auth-Request-User"); u != "" {
			fmt.Fprintf(w, " user=%s", u) // a sign-in gate vouched for it
		}
	}))
	return 0
}

// appCommand is a start_command running the test binary as the app.
func appCommand() string {
	return fmt.Sprintf("exec env BERTH_TEST_ROLE=app %q -test.run=^$", os.Args[0])
}

// testOptions make the test binary the agent of process replicas, and,
// under BERTH_TEST_STORE=etcd, keep o.DataDir's store in the test etcd
// member under a prefix of its own (the same for a berth started again on
// that dir).
func testOptions(o *Options) {
	o.AgentCommand = []string{os.Args[0]}
	o.AgentEnv = []string{"BERTH_TEST_ROLE=agent"}
	testStore(o)
}

// testStore, under BERTH_TEST_STORE=etcd, keeps o.DataDir's store in the
// test member, under a prefix of its own.
func testStore(o *Options) {
	if testStoreEtcd != nil && o.Store == nil && len(o.StoreEtcd.Endpoints) == 0 {
		o.StoreEtcd = EtcdStoreOptions{Endpoints: testStoreEtcd, Prefix: "/berth/test" + o.DataDir + "/", ClaimTTL: 2 * time.Second}
	}
}

// skipShort skips a test that takes long by design in the short tier
// (go test -short), saying why and what covers it there.
func skipShort(t *testing.T, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why)
	}
}

// openTestStore opens, from outside the server, the store a server on dir
// keeps its records in (a test reading or planting a record between two
// runs): the SQLite store in dir, or under BERTH_TEST_STORE=etcd its
// prefix in the test member, as the host of dir's host-id.
func openTestStore(t *testing.T, dir string) (Store, func() error) {
	t.Helper()
	if testStoreEtcd == nil {
		st, err := store.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return st, st.Close
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: testStoreEtcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	host, err := loadHostID(dir) // the host id a server on dir without a fleet id opens it as
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	st, err := etcdstore.Open(t.Context(), cli, "/berth/test"+dir+"/", host)
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	return st, cli.Close
}

// testStoreValues is every key and value of dir's store in the test etcd
// member (BERTH_TEST_STORE=etcd); none otherwise.
func testStoreValues(t *testing.T, dir string) map[string]string {
	t.Helper()
	if testStoreEtcd == nil {
		return nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: testStoreEtcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	g, err := cli.Get(t.Context(), "/berth/test"+dir+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(g.Kvs))
	for _, kv := range g.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}
