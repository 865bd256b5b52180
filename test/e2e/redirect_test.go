package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"rekey.io/rekey/pkg/pki"
)

var probePaths = []string{
	"/", "//", "/apis", "/apis/", "/apis/certificates.rekey.io", "/apis/certificates.rekey.io/",
	"/apis/certificates.rekey.io/v1alpha1", "/apis/certificates.rekey.io/v1alpha1/",
	"/apis/certificates.rekey.io/v1alpha1/certificatesigningrequests/",
	"/apis/certificates.rekey.io/v1alpha1//certificatesigningrequests",
	"/apis/certificates.rekey.io/v1alpha1/../v1alpha1/certificatesigningrequests",
	"/apis/certificates.rekey.io/./v1alpha1", "/openapi/v2", "/openapi/v3", "/openapi/v3/",
	"/debug/pprof", "/debug/pprof/", "/debug/flags/v", "/metrics", "/healthz", "/readyz/", "/version/",
	"/index.html", "/ui", "/swagger-ui/", "/swaggerapi",
}

func noFollow(c *http.Client) *http.Client {
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.Timeout = 10 * time.Second
	return c
}

func probe(t *testing.T, client *http.Client, base string, paths []string) {
	t.Helper()
	for _, p := range paths {
		req, _ := http.NewRequest("GET", base+p, nil)
		req.URL.Opaque = "//" + req.URL.Host + p // keep "..", "//" and "." as sent
		// A conditional GET must not turn into 304 Not Modified either.
		req.Header.Set("If-None-Match", "*")
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("GET %s: %v", p, err)
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			t.Errorf("GET %s answered %d (Location %q)", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}

func TestRekeyNeverRedirects(t *testing.T) {
	pool := x509.NewCertPool()
	pool.AddCert(cluster.RekeyServingCA.Cert)
	direct := fmt.Sprintf("https://127.0.0.1:%d", cluster.RekeyPort)

	t.Run("direct, anonymous", func(t *testing.T) {
		probe(t, noFollow(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}), direct, probePaths)
	})
	t.Run("direct, as the front proxy", func(t *testing.T) {
		proxy, err := pki.Load(cluster.Dir+"/pki/front-proxy-client.crt", cluster.Dir+"/pki/front-proxy-client.key")
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, _ := proxy.KeyPEM()
		pair, err := tls.X509KeyPair(proxy.CertPEM(), keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		client := noFollow(&http.Client{Transport: &headerTransport{
			base:    &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}},
			headers: map[string]string{"X-Remote-User": "e2e-admin", "X-Remote-Group": "system:masters"},
		}})
		probe(t, client, direct, probePaths)
	})
	t.Run("through the aggregator", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		transport, err := rest.TransportFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var rekeyPaths []string
		for _, p := range probePaths {
			if len(p) > len("/apis/certificates.rekey.io") && p[:len("/apis/certificates.rekey.io")] == "/apis/certificates.rekey.io" {
				rekeyPaths = append(rekeyPaths, p)
			}
		}
		probe(t, noFollow(&http.Client{Transport: transport}), cfg.Host, rekeyPaths)
	})
}

type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}
