package standalone

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEmbeddedEtcdAcceptsNoUnauthenticatedClient checks both listeners: the
// client socket is a 0600 unix socket (and works), and the peer port asks
// for a client certificate that only this process has.
func TestEmbeddedEtcdAcceptsNoUnauthenticatedClient(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	e, err := StartEtcd(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !strings.HasPrefix(e.ClientURL, "unix:///") {
		t.Fatalf("client URL %q is not a unix socket", e.ClientURL)
	}
	st, err := os.Stat(filepath.Join(dir, etcdClientSocket))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("client socket mode is %v, want a socket with 0600", st.Mode())
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{e.ClientURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	if _, err := client.Put(ctx, "/probe", "x"); err != nil {
		t.Fatalf("writing through the socket: %v", err)
	}

	peers := e.server.Config().ListenPeerUrls
	if len(peers) != 1 || peers[0].Scheme != "https" {
		t.Fatalf("peer listeners %v, want one https URL", peers)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Get(peers[0].String() + "/members")
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("peer port answered %s to a client without a certificate", resp.Status)
	}
	for _, u := range e.server.Config().ListenClientUrls {
		if u.Scheme != "unix" {
			t.Fatalf("client listener %s is not a unix socket", u.String())
		}
	}
}
