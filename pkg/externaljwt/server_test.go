package externaljwt

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	externaljwtv1 "k8s.io/externaljwt/apis/v1"
	"k8s.io/klog/v2/ktesting"

	"rekey.io/rekey/pkg/jwtkey"
)

// fakeSource is a KeySource whose key set a test replaces.
type fakeSource struct {
	mu  sync.Mutex
	ks  KeySet
	err error
}

func (f *fakeSource) Keys(context.Context) (KeySet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ks, f.err
}

func (f *fakeSource) set(ks KeySet) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ks = ks
}

// localSigner signs with a key in memory, through jwtkey.Sign: the
// Signer of these tests (rekey-agent jwt-signer's signs in rekey-apiserver).
type localSigner struct {
	kid    string
	signer crypto.Signer
	err    error
}

func (l *localSigner) SignJWT(_ context.Context, claims string) (string, string, string, error) {
	if l.err != nil {
		return "", "", "", l.err
	}
	hdr, sig, err := jwtkey.Sign(l.signer, l.kid, claims)
	return hdr, sig, l.kid, err
}

var (
	ecKeyOnce sync.Once
	ecKey     *ecdsa.PrivateKey
	rsaKey    *rsa.PrivateKey
)

func testKeys(t testing.TB) (*ecdsa.PrivateKey, *rsa.PrivateKey) {
	t.Helper()
	ecKeyOnce.Do(func() {
		var err error
		if ecKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			panic(err)
		}
		if rsaKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return ecKey, rsaKey
}

func keySet(kid string, signer crypto.Signer) KeySet {
	return KeySet{
		Keys:               []VerificationKey{{KeyID: kid, PublicKey: signer.Public()}},
		DataTimestamp:      time.Unix(1700000000, 0),
		RefreshHint:        time.Minute,
		MaxTokenExpiration: 24 * time.Hour,
	}
}

// startServer serves a Server for source on a Unix socket in a temporary
// directory and returns a client of the generated v1 API.
func startServer(t *testing.T, source KeySource, signer Signer, opts Options) externaljwtv1.ExternalJWTSignerClient {
	t.Helper()
	path := filepath.Join(t.TempDir(), "signer.sock")
	lis, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("socket mode = %o, want 600", perm)
	}
	return serveOn(t, lis, "unix://"+path, source, signer, opts)
}

// serveOn serves on lis and dials target.
func serveOn(t *testing.T, lis net.Listener, target string, source KeySource, signer Signer, opts Options) externaljwtv1.ExternalJWTSignerClient {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	srv, err := NewServer(source, signer, opts)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, lis, srv) }()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return externaljwtv1.NewExternalJWTSignerClient(conn)
}

func claims64(t testing.TB, claims map[string]any) string {
	t.Helper()
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// verifyJWT checks token as a verifier would, against the keys FetchKeys
// answered: the header has exactly alg, kid and typ=JWT, the kid names a
// key that is not excluded from discovery, and the signature verifies with
// it. It returns the header.
func verifyJWT(t *testing.T, token string, keys []*externaljwtv1.Key) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts, want 3", len(parts))
	}
	hdrJSON, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		t.Fatalf("header: %v", err)
	}
	var hdr map[string]any
	if err := json.Unmarshal(hdrJSON, &hdr); err != nil {
		t.Fatalf("header: %v", err)
	}
	if len(hdr) != 3 || hdr["typ"] != "JWT" || hdr["kid"] == nil || hdr["alg"] == nil {
		t.Fatalf("header = %s, want exactly alg, kid and typ=JWT", hdrJSON)
	}
	var pub any
	for _, k := range keys {
		if k.KeyId == hdr["kid"] {
			if k.ExcludeFromOidcDiscovery {
				t.Fatalf("token signed by kid %q, which is excluded from discovery", k.KeyId)
			}
			if pub, err = x509.ParsePKIXPublicKey(k.Key); err != nil {
				t.Fatal(err)
			}
		}
	}
	if pub == nil {
		t.Fatalf("kid %v is not among the fetched keys", hdr["kid"])
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		t.Fatalf("signature: %v", err)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	switch hdr["alg"] {
	case "ES256":
		ec, ok := pub.(*ecdsa.PublicKey)
		if !ok {
			t.Fatalf("ES256 token, key %T", pub)
		}
		if len(sig) != 64 {
			t.Fatalf("ES256 signature is %d bytes, want 64 (R||S)", len(sig))
		}
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		if !ecdsa.Verify(ec, digest[:], r, s) {
			t.Fatal("ES256 signature does not verify")
		}
	case "RS256":
		rk, ok := pub.(*rsa.PublicKey)
		if !ok {
			t.Fatalf("RS256 token, key %T", pub)
		}
		if err := rsa.VerifyPKCS1v15(rk, crypto.SHA256, digest[:], sig); err != nil {
			t.Fatalf("RS256 signature does not verify: %v", err)
		}
	default:
		t.Fatalf("alg %v", hdr["alg"])
	}
	return hdr
}

func TestSignVerifies(t *testing.T) {
	ec, rk := testKeys(t)
	for _, tc := range []struct {
		alg    jwtkey.Algorithm
		signer crypto.Signer
	}{{jwtkey.ES256, ec}, {jwtkey.RS256, rk}} {
		t.Run(string(tc.alg), func(t *testing.T) {
			kid := "kid-" + string(tc.alg)
			var fetched []KeySet
			var mu sync.Mutex
			client := startServer(t, &fakeSource{ks: keySet(kid, tc.signer)}, &localSigner{kid: kid, signer: tc.signer}, Options{FetchedKeys: func(_ context.Context, ks KeySet) {
				mu.Lock()
				defer mu.Unlock()
				fetched = append(fetched, ks)
			}})
			ctx := t.Context()
			keys, err := client.FetchKeys(ctx, &externaljwtv1.FetchKeysRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(keys.Keys) != 1 || keys.RefreshHintSeconds != 60 || !keys.DataTimestamp.AsTime().Equal(time.Unix(1700000000, 0)) {
				t.Fatalf("FetchKeys = %v", keys)
			}
			mu.Lock()
			if len(fetched) != 1 || fetched[0].Keys[0].KeyID != kid {
				t.Errorf("FetchedKeys saw %v, want the one answer", fetched)
			}
			mu.Unlock()
			c := claims64(t, map[string]any{"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:default:default", "exp": 1700003600})
			resp, err := client.Sign(ctx, &externaljwtv1.SignJWTRequest{Claims: c})
			if err != nil {
				t.Fatal(err)
			}
			hdr := verifyJWT(t, resp.Header+"."+c+"."+resp.Signature, keys.Keys)
			if hdr["alg"] != string(tc.alg) || hdr["kid"] != kid {
				t.Errorf("header = %v", hdr)
			}
		})
	}
}

func TestSignRefusesClaims(t *testing.T) {
	ec, _ := testKeys(t)
	client := startServer(t, &fakeSource{ks: keySet("k1", ec)}, &localSigner{kid: "k1", signer: ec}, Options{})
	for name, c := range map[string]string{
		"empty":          "",
		"oversize":       base64.RawURLEncoding.EncodeToString([]byte(`{"a":"` + strings.Repeat("x", jwtkey.MaxClaimsSize) + `"}`)),
		"invalid base64": "eyJ!!!",
		"padded":         base64.URLEncoding.EncodeToString([]byte(`{"a":1}`)),
		"std alphabet":   base64.StdEncoding.EncodeToString([]byte(`{"a":"???>>>"}`)),
		"not json":       base64.RawURLEncoding.EncodeToString([]byte(`not json`)),
		"json array":     base64.RawURLEncoding.EncodeToString([]byte(`[1]`)),
		"json null":      base64.RawURLEncoding.EncodeToString([]byte(`null`)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := client.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: c})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Sign = %v, want InvalidArgument", err)
			}
		})
	}
}

// A Signer's answer kube-apiserver could not verify with the keys served
// is refused: a kid not served, or served only to verify old tokens.
func TestSignRefusesKeysNotServed(t *testing.T) {
	ec, rk := testKeys(t)
	ks := keySet("old", ec)
	ks.Keys[0].ExcludeFromOIDCDiscovery = true
	source := &fakeSource{ks: ks}
	client := startServer(t, source, &localSigner{kid: "old", signer: ec}, Options{})
	c := claims64(t, map[string]any{"sub": "x"})
	if _, err := client.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: c}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "excluded") {
		t.Fatalf("Sign with an excluded key = %v, want refused", err)
	}
	// The excluded key is still served, to verify the tokens it signed.
	keys, err := client.FetchKeys(t.Context(), &externaljwtv1.FetchKeysRequest{})
	if err != nil || len(keys.Keys) != 1 || !keys.Keys[0].ExcludeFromOidcDiscovery {
		t.Fatalf("FetchKeys = %v, %v", keys, err)
	}
	// A kid that is not served.
	source.set(keySet("other", ec))
	if _, err := client.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: c}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not among the keys served") {
		t.Fatalf("Sign with an unpublished key = %v, want Unavailable", err)
	}
	// A kid served with another kind of key than the header's alg.
	source.set(keySet("old", rk))
	if _, err := client.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: c}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "signs RS256") {
		t.Fatalf("Sign with an ES256 header for an RSA key = %v, want Unavailable", err)
	}
}

func TestCheckSigned(t *testing.T) {
	ec, _ := testKeys(t)
	ks := keySet("k", ec)
	c := claims64(t, map[string]any{"sub": "x"})
	hdr, sig, err := jwtkey.Sign(ec, "k", c)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSigned(ks, hdr, sig, "k"); err != nil {
		t.Fatalf("a good answer: %v", err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for name, tc := range map[string]struct{ hdr, sig, kid string }{
		"kid differs":      {hdr, sig, "other"},
		"extra field":      {enc(`{"alg":"ES256","kid":"k","typ":"JWT","x5u":"http://x"}`), sig, "k"},
		"no typ":           {enc(`{"alg":"ES256","kid":"k"}`), sig, "k"},
		"typ not JWT":      {enc(`{"alg":"ES256","kid":"k","cty":"JWT"}`), sig, "k"},
		"alg none":         {enc(`{"alg":"none","kid":"k","typ":"JWT"}`), sig, "k"},
		"header not json":  {enc(`alg`), sig, "k"},
		"header padded":    {base64.URLEncoding.EncodeToString([]byte(`{"alg":"ES256","kid":"k","typ":"JWT"}`)), sig, "k"},
		"header oversized": {strings.Repeat("A", maxHeaderSize+1), sig, "k"},
		"no signature":     {hdr, "", "k"},
		"signature bad":    {hdr, "!!", "k"},
	} {
		if err := checkSigned(ks, tc.hdr, tc.sig, tc.kid); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A Signer's gRPC status is answered as it is; another error is Internal.
func TestSignerErrors(t *testing.T) {
	ec, _ := testKeys(t)
	signer := &localSigner{kid: "k", signer: ec, err: status.Error(codes.Unavailable, "rekey-apiserver is unreachable")}
	client := startServer(t, &fakeSource{ks: keySet("k", ec)}, signer, Options{})
	c := claims64(t, map[string]any{"sub": "x"})
	if _, err := client.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: c}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Sign = %v, want the signer's Unavailable", err)
	}
	signer.err = errors.New("boom")
	if _, err := client.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: c}); status.Code(err) != codes.Internal {
		t.Fatalf("Sign = %v, want Internal", err)
	}
}

func TestFetchKeysRefusesWhatKubeAPIServerRefuses(t *testing.T) {
	ec, _ := testKeys(t)
	for name, mutate := range map[string]func(*KeySet){
		"no keys":        func(ks *KeySet) { ks.Keys = nil },
		"zero hint":      func(ks *KeySet) { ks.RefreshHint = 0 },
		"no timestamp":   func(ks *KeySet) { ks.DataTimestamp = time.Time{} },
		"empty kid":      func(ks *KeySet) { ks.Keys[0].KeyID = "" },
		"long kid":       func(ks *KeySet) { ks.Keys[0].KeyID = strings.Repeat("k", 1025) },
		"bad public key": func(ks *KeySet) { ks.Keys[0].PublicKey = "not a key" },
		"kid twice":      func(ks *KeySet) { ks.Keys = append(ks.Keys, ks.Keys[0]) },
	} {
		t.Run(name, func(t *testing.T) {
			ks := keySet("k", ec)
			mutate(&ks)
			called := false
			client := startServer(t, &fakeSource{ks: ks}, &localSigner{kid: "k", signer: ec}, Options{FetchedKeys: func(context.Context, KeySet) { called = true }})
			if _, err := client.FetchKeys(t.Context(), &externaljwtv1.FetchKeysRequest{}); status.Code(err) != codes.Internal {
				t.Fatalf("FetchKeys = %v, want Internal", err)
			}
			if called {
				t.Error("FetchedKeys was called for a refused answer")
			}
		})
	}
	t.Run("source error", func(t *testing.T) {
		client := startServer(t, &fakeSource{err: errors.New("no keys yet")}, &localSigner{kid: "k", signer: ec}, Options{})
		if _, err := client.FetchKeys(t.Context(), &externaljwtv1.FetchKeysRequest{}); status.Code(err) != codes.Unavailable {
			t.Fatalf("FetchKeys = %v, want Unavailable", err)
		}
		if _, err := client.Metadata(t.Context(), &externaljwtv1.MetadataRequest{}); status.Code(err) != codes.Unavailable {
			t.Fatalf("Metadata = %v, want Unavailable", err)
		}
	})
	t.Run("source status", func(t *testing.T) {
		client := startServer(t, &fakeSource{err: status.Error(codes.FailedPrecondition, "wrong CA")}, &localSigner{kid: "k", signer: ec}, Options{})
		if _, err := client.FetchKeys(t.Context(), &externaljwtv1.FetchKeysRequest{}); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("FetchKeys = %v, want the source's FailedPrecondition", err)
		}
	})
	t.Run("sub-second hint rounds up", func(t *testing.T) {
		ks := keySet("k", ec)
		ks.RefreshHint = time.Millisecond
		resp, err := FetchKeysResponse(ks)
		if err != nil || resp.RefreshHintSeconds != 1 {
			t.Fatalf("FetchKeysResponse = %v, %v", resp, err)
		}
	})
}

func TestMetadata(t *testing.T) {
	ec, _ := testKeys(t)
	source := &fakeSource{ks: keySet("k", ec)}
	client := startServer(t, source, &localSigner{kid: "k", signer: ec}, Options{})
	resp, err := client.Metadata(t.Context(), &externaljwtv1.MetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.MaxTokenExpirationSeconds != 86400 {
		t.Errorf("MaxTokenExpirationSeconds = %d, want 86400", resp.MaxTokenExpirationSeconds)
	}
	for _, d := range []time.Duration{0, 599 * time.Second, 600*time.Second + time.Millisecond} {
		ks := keySet("k", ec)
		ks.MaxTokenExpiration = d
		source.set(ks)
		if _, err := client.Metadata(t.Context(), &externaljwtv1.MetadataRequest{}); status.Code(err) != codes.Internal {
			t.Errorf("Metadata with maxTokenExpiration %s = %v, want Internal", d, err)
		}
	}
	if _, err := NewServer(nil, &localSigner{}, Options{}); err == nil {
		t.Error("NewServer with no source: no error")
	}
	if _, err := NewServer(source, nil, Options{}); err == nil {
		t.Error("NewServer with no signer: no error")
	}
}

func TestListen(t *testing.T) {
	dir := t.TempDir()
	t.Run("stale socket replaced", func(t *testing.T) {
		path := filepath.Join(dir, "stale.sock")
		// A socket file left by a process that died: listen, keep the file.
		old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		old.SetUnlinkOnClose(false)
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		lis, err := Listen(path, 0o660)
		if err != nil {
			t.Fatalf("Listen over a stale socket: %v", err)
		}
		defer func() { _ = lis.Close() }()
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o660 {
			t.Fatalf("socket mode: %v, %v; want 660", fi.Mode(), err)
		}
		conn, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("dialing the new socket: %v", err)
		}
		_ = conn.Close()
	})
	t.Run("live socket refused", func(t *testing.T) {
		path := filepath.Join(dir, "live.sock")
		live, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = live.Close() }()
		if lis, err := Listen(path, 0o600); err == nil {
			_ = lis.Close()
			t.Fatal("Listen over a socket in use: no error")
		}
	})
	t.Run("regular file refused", func(t *testing.T) {
		path := filepath.Join(dir, "file")
		if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
		if lis, err := Listen(path, 0o600); err == nil {
			_ = lis.Close()
			t.Fatal("Listen over a regular file: no error")
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "keep me" {
			t.Fatalf("the regular file was changed: %q, %v", b, err)
		}
	})
	t.Run("abstract", func(t *testing.T) {
		name := "@rekey-externaljwt-test-" + filepath.Base(dir)
		lis, err := Listen(name, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lis.Close() }()
		conn, err := net.Dial("unix", name)
		if err != nil {
			t.Fatalf("dialing the abstract socket: %v", err)
		}
		_ = conn.Close()
	})
}

// With AllowedUIDs, a peer is served only when the kernel says (its
// SO_PEERCRED) it runs as one of them; a peer that cannot be told (not a
// Unix socket) is refused too.
func TestAllowedUIDs(t *testing.T) {
	ec, _ := testKeys(t)
	uid := uint32(os.Getuid())
	c := claims64(t, map[string]any{"sub": "system:serviceaccount:default:default", "iat": 1700000000, "exp": 1700003600})
	calls := func(client externaljwtv1.ExternalJWTSignerClient) []error {
		_, errSign := client.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: c})
		_, errFetch := client.FetchKeys(t.Context(), &externaljwtv1.FetchKeysRequest{})
		_, errMeta := client.Metadata(t.Context(), &externaljwtv1.MetadataRequest{})
		return []error{errSign, errFetch, errMeta}
	}
	abstract := "@rekey-externaljwt-uid-" + filepath.Base(t.TempDir())
	for name, tc := range map[string]struct {
		listen  func() (net.Listener, string)
		allowed []uint32
		want    codes.Code
	}{
		"same uid":              {allowed: []uint32{uid}, want: codes.OK},
		"same uid among others": {allowed: []uint32{uid + 1, uid}, want: codes.OK},
		"another uid only":      {allowed: []uint32{uid + 1}, want: codes.PermissionDenied},
		"abstract, another uid only": {
			listen: func() (net.Listener, string) {
				lis, err := Listen(abstract, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				return lis, "unix-abstract:" + strings.TrimPrefix(abstract, "@")
			},
			allowed: []uint32{uid + 1}, want: codes.PermissionDenied,
		},
		"TCP: peer unknown": {
			listen: func() (net.Listener, string) {
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				return lis, lis.Addr().String()
			},
			allowed: []uint32{uid}, want: codes.PermissionDenied,
		},
	} {
		t.Run(name, func(t *testing.T) {
			opts := Options{AllowedUIDs: tc.allowed}
			src := &fakeSource{ks: keySet("k", ec)}
			sig := &localSigner{kid: "k", signer: ec}
			var client externaljwtv1.ExternalJWTSignerClient
			if tc.listen == nil {
				client = startServer(t, src, sig, opts)
			} else {
				lis, target := tc.listen()
				client = serveOn(t, lis, target, src, sig, opts)
			}
			for i, err := range calls(client) {
				if status.Code(err) != tc.want {
					t.Errorf("call %d = %v, want %s", i, err, tc.want)
				}
			}
		})
	}
}
