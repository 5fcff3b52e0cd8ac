package fleetca

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/secrets"
)

// signToken is a join as Join makes it, answered by Sign and opened.
func signToken(t *testing.T, d string, key secrets.Key, tok, csr string, now time.Time) (apitype.FleetJoinGrant, error) {
	t.Helper()
	req, open, err := NewJoinRequest(tok, csr)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := Sign(d, key, req, now)
	if err != nil {
		return apitype.FleetJoinGrant{}, err
	}
	return open(resp)
}

// spend spends tok as a join request MACed with it does.
func spend(t *testing.T, d string, key secrets.Key, tok, host string, now time.Time) error {
	t.Helper()
	req, _, err := NewJoinRequest(tok, "csr")
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeJoinRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = useToken(d, key, r, host, now)
	return err
}

// mitm is a host in between a joining host and the first host, on plain
// HTTP: it may change the request before forwarding it and the answer
// before returning it.
func mitm(t *testing.T, upstream string, req func(*apitype.FleetJoinRequest), resp func([]byte) []byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if req != nil {
			var jr apitype.FleetJoinRequest
			if err := json.Unmarshal(b, &jr); err != nil {
				t.Errorf("mitm: %v", err)
			}
			req(&jr)
			b, _ = json.Marshal(jr)
		}
		up, err := http.Post(upstream+r.URL.Path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Errorf("mitm: %v", err)
			w.WriteHeader(502)
			return
		}
		defer up.Body.Close()
		rb, _ := io.ReadAll(up.Body)
		if resp != nil && up.StatusCode == 200 {
			rb = resp(rb)
		}
		w.WriteHeader(up.StatusCode)
		w.Write(rb)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (a *authority) token(t *testing.T) (tok, pin string) {
	t.Helper()
	ir, err := Init(InitOptions{DataDir: a.dir})
	if err != nil {
		t.Fatal(err)
	}
	return ir.Token, ir.Pin
}

// nothingWritten fails when the join wrote the fleet configuration or a
// secret key into d.
func nothingWritten(t *testing.T, d string) {
	t.Helper()
	for _, p := range []string{filepath.Join(Dir(d), ConfigFile), filepath.Join(Dir(d), HostCert), filepath.Join(d, secrets.KeyFileName)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s written: %v", p, err)
		}
	}
}

// TestJoinCarriesSecretKey: a joined host's data dir holds the first
// host's secret key, the same bytes in a 0600 secret.key, so a secret
// sealed on the first host opens on the joined one; the request carries
// neither the token nor the key in the clear, nor does the answer.
func TestJoinCarriesSecretKey(t *testing.T) {
	a := startAuthority(t, "alpha")
	key := testSecretKey(t, a.dir)
	tok, pin := a.token(t)
	var sent, got []byte
	var mu sync.Mutex
	url := mitm(t, a.url, func(r *apitype.FleetJoinRequest) {
		mu.Lock()
		sent, _ = json.Marshal(r)
		mu.Unlock()
	}, func(b []byte) []byte {
		mu.Lock()
		got = append([]byte(nil), b...)
		mu.Unlock()
		return b
	})
	d := t.TempDir()
	res, err := Join(context.Background(), JoinOptions{DataDir: d, Server: url, Token: tok, Pin: pin, HostID: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d, secrets.KeyFileName)
	if res.KeyFile != path || res.ReplacedKey {
		t.Fatalf("result: %+v", res)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secret.key: %v %v", st, err)
	}
	joined, source, err := secrets.LoadKey("", d)
	if err != nil || source != path || joined != key {
		t.Fatalf("the joined host's key: %v from %s; the same as the first host's: %v", err, source, joined == key)
	}
	sealed := key.Seal([]byte("s3cret"), []byte("ad"))
	if plain, err := joined.Open(sealed, []byte("ad")); err != nil || string(plain) != "s3cret" {
		t.Fatalf("a value sealed on the first host, opened on the joined one: %q %v", plain, err)
	}
	mu.Lock()
	defer mu.Unlock()
	hexKey := hex.EncodeToString(key[:])
	for what, b := range map[string][]byte{"request": sent, "answer": got} {
		if len(b) == 0 || bytes.Contains(b, []byte(tok)) || bytes.Contains(b, []byte(strings.TrimPrefix(tok, "bfj_"))) || bytes.Contains(b, []byte(hexKey)) || bytes.Contains(b, []byte("BEGIN CERTIFICATE-----")) && what == "answer" {
			t.Errorf("the %s on the wire: %s", what, b)
		}
	}
}

// TestJoinSwappedCSR: a host in between that swaps the certificate
// request for its own (keeping the MAC) is refused as an unknown token,
// and the token is not spent: the real host then joins with it.
func TestJoinSwappedCSR(t *testing.T) {
	a := startAuthority(t, "alpha")
	tok, pin := a.token(t)
	theirs := csrPEM(t, "mallory")
	url := mitm(t, a.url, func(r *apitype.FleetJoinRequest) { r.CSR = theirs }, nil)
	d := t.TempDir()
	_, err := Join(context.Background(), JoinOptions{DataDir: d, Server: url, Token: tok, Pin: pin, HostID: "beta"})
	if err == nil || !strings.Contains(err.Error(), "(403)") || !strings.Contains(err.Error(), ErrTokenInvalid.Error()) {
		t.Fatalf("a swapped CSR: %v", err)
	}
	nothingWritten(t, d)
	if _, err := Join(context.Background(), JoinOptions{DataDir: d, Server: a.url, Token: tok, Pin: pin, HostID: "beta"}); err != nil {
		t.Fatalf("the real host with the same token: %v", err)
	}
}

// TestJoinTamperedAnswer: an answer with one byte flipped, and an answer
// to another request replayed, do not open: the join fails saying so and
// writes nothing.
func TestJoinTamperedAnswer(t *testing.T) {
	a := startAuthority(t, "alpha")
	flip := func(b []byte) []byte {
		var r apitype.FleetJoinResponse
		if err := json.Unmarshal(b, &r); err != nil {
			t.Errorf("answer: %v", err)
		}
		raw, _ := base64.StdEncoding.DecodeString(r.Sealed)
		raw[len(raw)/2] ^= 1
		r.Sealed = base64.StdEncoding.EncodeToString(raw)
		out, _ := json.Marshal(r)
		return out
	}
	tok, pin := a.token(t)
	d := t.TempDir()
	_, err := Join(context.Background(), JoinOptions{DataDir: d, Server: mitm(t, a.url, nil, flip), Token: tok, Pin: pin, HostID: "beta"})
	if !errors.Is(err, ErrJoinResponse) || !strings.Contains(err.Error(), "does not open with the join token") {
		t.Fatalf("a flipped byte: %v", err)
	}
	nothingWritten(t, d)

	// Replayed: the answer to one join returned to the next.
	var mu sync.Mutex
	var recorded []byte
	replay := func(b []byte) []byte {
		mu.Lock()
		defer mu.Unlock()
		if recorded == nil {
			recorded = b
		}
		return recorded
	}
	url := mitm(t, a.url, nil, replay)
	tok1, _ := a.token(t)
	if _, err := Join(context.Background(), JoinOptions{DataDir: t.TempDir(), Server: url, Token: tok1, Pin: pin, HostID: "gamma"}); err != nil {
		t.Fatal(err)
	}
	tok2, _ := a.token(t)
	d = t.TempDir()
	if _, err := Join(context.Background(), JoinOptions{DataDir: d, Server: url, Token: tok2, Pin: pin, HostID: "gamma"}); !errors.Is(err, ErrJoinResponse) {
		t.Fatalf("a replayed answer: %v", err)
	}
	nothingWritten(t, d)
}

// TestJoinWrongMAC: a request naming a real token's id with a MAC under
// another token is refused exactly as an unknown token is, and does not
// spend the token.
func TestJoinWrongMAC(t *testing.T) {
	a := startAuthority(t, "alpha")
	key := testSecretKey(t, a.dir)
	tok, _ := a.token(t)
	csr := csrPEM(t, "beta")
	forged, _, err := NewJoinRequest("bfj_"+strings.Repeat("0", 64), csr)
	if err != nil {
		t.Fatal(err)
	}
	unknown := forged
	forged.TokenID = tokenID(tok)
	_, errForged := Sign(a.dir, key, forged, time.Now())
	_, errUnknown := Sign(a.dir, key, unknown, time.Now())
	if !errors.Is(errForged, ErrTokenInvalid) || errUnknown == nil || errForged.Error() != errUnknown.Error() {
		t.Fatalf("a wrong MAC: %v; an unknown token: %v", errForged, errUnknown)
	}
	if _, err := signToken(t, a.dir, key, tok, csr, time.Now()); err != nil {
		t.Fatalf("the token after a forged request: %v", err)
	}
	// Malformed requests name the field.
	for field, mod := range map[string]func(*apitype.FleetJoinRequest){
		"token_id": func(r *apitype.FleetJoinRequest) { r.TokenID = "zz" },
		"nonce":    func(r *apitype.FleetJoinRequest) { r.Nonce = "AAAA" },
		"mac":      func(r *apitype.FleetJoinRequest) { r.MAC = "" },
	} {
		r := unknown
		mod(&r)
		if _, err := Sign(a.dir, key, r, time.Now()); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), field) {
			t.Errorf("bad %s: %v", field, err)
		}
	}
}

// TestJoinSecretKeyConflicts: a joining data dir with another secret key
// is refused without --force and nothing written; --force replaces it and
// says so; the same key already there is fine; BERTH_SECRET_KEY other
// than the fleet's is refused, the fleet's accepted.
func TestJoinSecretKeyConflicts(t *testing.T) {
	a := startAuthority(t, "alpha")
	key := testSecretKey(t, a.dir)
	ctx := context.Background()

	d := t.TempDir()
	other, _, err := secrets.LoadKey("", d) // as berth serve made it on first start
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d, secrets.KeyFileName)
	before, _ := os.ReadFile(path)
	tok, pin := a.token(t)
	_, err = Join(ctx, JoinOptions{DataDir: d, Server: a.url, Token: tok, Pin: pin, HostID: "beta"})
	if err == nil || !strings.Contains(err.Error(), "holds another secret key than the fleet's") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("another key in the data dir: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("the refused join changed secret.key")
	}
	if _, err := os.Stat(filepath.Join(Dir(d), ConfigFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused join wrote fleet.json: %v", err)
	}
	tok, _ = a.token(t)
	res, err := Join(ctx, JoinOptions{DataDir: d, Server: a.url, Token: tok, Pin: pin, HostID: "beta", Force: true})
	if err != nil || !res.ReplacedKey {
		t.Fatalf("--force: %+v %v", res, err)
	}
	if k, _, _ := secrets.ReadKeyFile(d); k != key || k == other {
		t.Fatal("--force did not write the fleet's key")
	}

	// The fleet's key already there.
	d = t.TempDir()
	if err := secrets.WriteKeyFile(d, key); err != nil {
		t.Fatal(err)
	}
	tok, _ = a.token(t)
	if res, err := Join(ctx, JoinOptions{DataDir: d, Server: a.url, Token: tok, Pin: pin, HostID: "gamma"}); err != nil || res.ReplacedKey {
		t.Fatalf("the same key there: %+v %v", res, err)
	}

	// BERTH_SECRET_KEY.
	d = t.TempDir()
	tok, _ = a.token(t)
	_, err = Join(ctx, JoinOptions{DataDir: d, Server: a.url, Token: tok, Pin: pin, HostID: "delta", SecretKey: "not the fleet's"})
	if err == nil || !strings.Contains(err.Error(), "BERTH_SECRET_KEY is set and is not the fleet's secret key") || !strings.Contains(err.Error(), "unset it") {
		t.Fatalf("another BERTH_SECRET_KEY: %v", err)
	}
	nothingWritten(t, d)
	tok, _ = a.token(t)
	if _, err := Join(ctx, JoinOptions{DataDir: d, Server: a.url, Token: tok, Pin: pin, HostID: "delta", SecretKey: hex.EncodeToString(key[:])}); err != nil {
		t.Fatalf("the fleet's BERTH_SECRET_KEY: %v", err)
	}
}

// TestMainJoinSecretKey: berth fleet join refuses a data dir with another
// secret key, and with --force replaces it and says what that means.
func TestMainJoinSecretKey(t *testing.T) {
	a := startAuthority(t, "alpha")
	t.Setenv("BERTH_SECRET_KEY", "")
	d := t.TempDir()
	if _, _, err := secrets.LoadKey("", d); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	tok, pin := a.token(t)
	if code := Main(context.Background(), []string{"join", "--data-dir", d, "--server", a.url, "--token", tok, "--ca-sha256", pin, "--host-id", "beta"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "holds another secret key") {
		t.Fatalf("join: %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	tok, _ = a.token(t)
	if code := Main(context.Background(), []string{"join", "--data-dir", d, "--server", a.url, "--token", tok, "--ca-sha256", pin, "--host-id", "beta", "--force"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "no longer open") || !strings.Contains(out.String(), "Joined as host beta") {
		t.Fatalf("join --force: %d\n%s%s", code, out.String(), errb.String())
	}
}
