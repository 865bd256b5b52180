package peerverify

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
)

var start = time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCert(t *testing.T, cn string, parent *keyPair, isCA bool, notAfter time.Time) *keyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: start.Add(-time.Hour), NotAfter: notAfter,
		BasicConstraintsValid: true, IsCA: isCA,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &keyPair{cert: cert, key: key}
}

// options is a CA provider: the pool changes when the bundle does.
type options struct{ opts x509.VerifyOptions }

func (o *options) set(cas ...*keyPair) {
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca.cert)
	}
	o.opts = x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
}

func (o *options) fn() x509request.VerifyOptionFunc {
	return func() (x509.VerifyOptions, bool) { return o.opts, o.opts.Roots != nil }
}

// connection is one TLS connection's state: its certificates are the same
// pointers for every request on it, as net/http gives them.
func connection(certs ...*keyPair) *tls.ConnectionState {
	state := &tls.ConnectionState{}
	for _, c := range certs {
		state.PeerCertificates = append(state.PeerCertificates, c.cert)
	}
	return state
}

func request(conn *tls.ConnectionState, headers map[string]string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.TLS = conn
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return req
}

type clock struct{ now time.Time }

func (c *clock) get() time.Time { return c.now }

func TestClientCertificate(t *testing.T) {
	ca := newCert(t, "ca", nil, true, start.Add(24*time.Hour))
	other := newCert(t, "other-ca", nil, true, start.Add(24*time.Hour))
	alice := newCert(t, "alice", ca, false, start.Add(2*time.Hour))
	mallory := newCert(t, "mallory", other, false, start.Add(2*time.Hour))
	opts := &options{}
	opts.set(ca)
	clk := &clock{now: start}
	cache := New(clk.get)
	auth := ClientCertificate(cache, opts.fn(), x509request.CommonNameUserConversion)

	conn := connection(alice)
	name := func(req *http.Request) string {
		resp, ok, err := auth.AuthenticateRequest(req)
		if err != nil || !ok {
			return ""
		}
		return resp.User.GetName()
	}
	if got := name(request(conn, nil)); got != "alice" || cache.len() != 1 {
		t.Fatalf("first request: %q, %d cached", got, cache.len())
	}
	// Same connection: answered from the cache, the same chain.
	if got := name(request(conn, nil)); got != "alice" || cache.len() != 1 {
		t.Fatalf("second request: %q", got)
	}
	if got := name(request(connection(mallory), nil)); got != "" {
		t.Fatalf("a certificate of another CA authenticated as %q", got)
	}
	if got := name(request(nil, nil)); got != "" {
		t.Fatalf("no TLS authenticated as %q", got)
	}
	// The CA bundle changes (alice's CA removed): verified again, refused,
	// although this connection verified a moment ago.
	opts.set(other)
	if got := name(request(conn, nil)); got != "" {
		t.Fatalf("after the CA was removed: %q", got)
	}
	opts.set(ca)
	if got := name(request(conn, nil)); got != "alice" {
		t.Fatalf("after the CA was back: %q", got)
	}
	// Past the certificate's expiry, the cached verification is not used.
	clk.now = start.Add(3 * time.Hour)
	if got := name(request(conn, nil)); got != "" {
		t.Fatalf("an expired certificate authenticated as %q", got)
	}
}

func TestClientCertificateIntermediates(t *testing.T) {
	root := newCert(t, "root", nil, true, start.Add(24*time.Hour))
	intermediate := newCert(t, "intermediate", root, true, start.Add(24*time.Hour))
	bob := newCert(t, "bob", intermediate, false, start.Add(2*time.Hour))
	opts := &options{}
	opts.set(root)
	auth := ClientCertificate(New(func() time.Time { return start }), opts.fn(), x509request.CommonNameUserConversion)
	if resp, ok, err := auth.AuthenticateRequest(request(connection(bob, intermediate), nil)); err != nil || !ok || resp.User.GetName() != "bob" {
		t.Fatalf("with the intermediate: %v %v %v", resp, ok, err)
	}
	if _, ok, _ := auth.AuthenticateRequest(request(connection(bob), nil)); ok {
		t.Fatal("authenticated without the intermediate")
	}
}

type fixed []string

func (f fixed) Value() []string { return f }

// frontProxyFixture is a front proxy CA, the proxy's certificate, another
// certificate of that CA ("rogue"), options trusting the CA, a cache and
// the usual headers.
type frontProxyFixture struct {
	proxy, rogue *keyPair
	opts         *options
	cache        *Cache
	headers      authenticator.Request
}

func newFrontProxyFixture(t *testing.T) frontProxyFixture {
	ca := newCert(t, "front-proxy-ca", nil, true, start.Add(24*time.Hour))
	f := frontProxyFixture{
		proxy:   newCert(t, "front-proxy-client", ca, false, start.Add(2*time.Hour)),
		rogue:   newCert(t, "rogue", ca, false, start.Add(2*time.Hour)),
		opts:    &options{},
		cache:   New(func() time.Time { return start }),
		headers: headerrequest.NewDynamic(fixed{"X-Remote-User"}, fixed{"X-Remote-Uid"}, fixed{"X-Remote-Group"}, fixed{"X-Remote-Extra-"}),
	}
	f.opts.set(ca)
	return f
}

func TestFrontProxy(t *testing.T) {
	f := newFrontProxyFixture(t)
	proxy, rogue, opts, cache, headers := f.proxy, f.rogue, f.opts, f.cache, f.headers
	allowed := fixed{"front-proxy-client"}
	auth := FrontProxy(cache, opts.fn(), allowed, headers)

	conn := connection(proxy)
	who := func(req *http.Request) user.Info {
		resp, ok, err := auth.AuthenticateRequest(req)
		if err != nil || !ok {
			return nil
		}
		return resp.User
	}
	// Every request on the proxy's connection is its own user: the
	// headers are read each time, only the certificate's verification is
	// reused.
	for _, name := range []string{"alice", "bob", "alice"} {
		u := who(request(conn, map[string]string{"X-Remote-User": name, "X-Remote-Group": "devs"}))
		if u == nil || u.GetName() != name || len(u.GetGroups()) != 1 || u.GetGroups()[0] != "devs" {
			t.Fatalf("as %s: %+v", name, u)
		}
	}
	if cache.len() != 1 {
		t.Fatalf("%d verifications kept, want the connection's one", cache.len())
	}
	if u := who(request(conn, nil)); u != nil {
		t.Fatalf("no user header: %+v", u)
	}
	// A certificate of the same CA with a name not allowed is not the
	// proxy, even once verified.
	rogueConn := connection(rogue)
	for i := 0; i < 2; i++ {
		if u := who(request(rogueConn, map[string]string{"X-Remote-User": "admin"})); u != nil {
			t.Fatalf("a certificate not named as the proxy: %+v", u)
		}
	}
	// Any name when the list is empty.
	if u := FrontProxy(cache, opts.fn(), fixed{}, headers); u == nil {
		t.Fatal("nil")
	} else if resp, ok, _ := u.AuthenticateRequest(request(rogueConn, map[string]string{"X-Remote-User": "carol"})); !ok || resp.User.GetName() != "carol" {
		t.Fatal("an empty allowed list refused a verified proxy")
	}
}

var _ authenticator.Request = ClientCertificate(New(nil), nil, nil)

// TestFrontProxyRecord: the request context says the front proxy
// authenticated it only when FrontProxy did.
func TestFrontProxyRecord(t *testing.T) {
	f := newFrontProxyFixture(t)
	proxy, rogue, opts, cache, headers := f.proxy, f.rogue, f.opts, f.cache, f.headers
	frontProxy := FrontProxy(cache, opts.fn(), fixed{"front-proxy-client"}, headers)
	clientCert := ClientCertificate(cache, opts.fn(), x509request.CommonNameUserConversion)

	// serve runs auth inside the record, as the server's chain does, and
	// reports what the handler behind it sees.
	serve := func(auth authenticator.Request, req *http.Request) (authenticated, via bool) {
		WithFrontProxyRecord(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
			_, authenticated, _ = auth.AuthenticateRequest(req)
			via = ViaFrontProxy(req.Context())
		})).ServeHTTP(httptest.NewRecorder(), req)
		return authenticated, via
	}
	if ok, via := serve(frontProxy, request(connection(proxy), map[string]string{"X-Remote-User": "system:bootstrap:abcdef"})); !ok || !via {
		t.Fatalf("front proxy: authenticated %v, recorded %v", ok, via)
	}
	if ok, via := serve(frontProxy, request(connection(proxy), nil)); ok || via {
		t.Fatalf("front proxy without a user: authenticated %v, recorded %v", ok, via)
	}
	if ok, via := serve(frontProxy, request(connection(rogue), map[string]string{"X-Remote-User": "x"})); ok || via {
		t.Fatalf("a name not allowed: authenticated %v, recorded %v", ok, via)
	}
	if ok, via := serve(clientCert, request(connection(rogue), nil)); !ok || via {
		t.Fatalf("client certificate: authenticated %v, recorded %v", ok, via)
	}
	// Without the record (a chain that lacks it), nothing is recorded and
	// nothing breaks.
	if _, ok, _ := frontProxy.AuthenticateRequest(request(connection(proxy), map[string]string{"X-Remote-User": "u"})); !ok {
		t.Fatal("front proxy without the record")
	}
	if ViaFrontProxy(context.Background()) {
		t.Fatal("a bare context is not via the front proxy")
	}
}
