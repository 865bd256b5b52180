// Command tlsprobe is the install test's TLS client in a pod: it completes
// a TLS handshake with a server again and again, verifying the server's
// certificate with a CA bundle file (a mounted ConfigMap that rekey
// publishes), read afresh before every handshake since the kubelet
// replaces the file in place. Every failed handshake is a line starting
// with FAIL; a change of the bundle or of the server's certificate is a
// line of its own; every few seconds a line says how many handshakes
// succeeded. It never exits by itself: the test reads its log.
//
// With -credential-bundle it checks a podCertificate projected volume
// instead (podcert_test.go): every second it reads the credential bundle
// (a PKCS#8 key, then the certificate chain, leaf first) and the projected
// ClusterTrustBundle, and checks that the key is the leaf's, that the
// chain verifies against the trust bundle, and that the leaf's only URI
// SAN is -spiffe. A verified certificate it has not seen before is a line
// "VERIFIED serial=... uri=... issuer=... notBefore=... notAfter=...";
// a failed check a line starting with FAIL (once per distinct failure).
package main

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", "", "the server's host:port")
	serverName := flag.String("server-name", "", "the DNS name the server's certificate must have")
	caFile := flag.String("ca", "", "the PEM bundle to verify the server with")
	interval := flag.Duration("interval", 200*time.Millisecond, "time between handshakes")
	bundleFile := flag.String("credential-bundle", "", "a podCertificate credential bundle to check instead of handshakes")
	trustFile := flag.String("trust", "", "with -credential-bundle: the projected ClusterTrustBundle (PEM)")
	spiffe := flag.String("spiffe", "", "with -credential-bundle: the URI SAN the leaf must have")
	flag.Parse()
	if *bundleFile != "" {
		watchCredentials(*bundleFile, *trustFile, *spiffe)
		return
	}
	var lastBundle, lastLeaf string
	ok := 0
	report := time.NewTicker(5 * time.Second)
	defer report.Stop()
	for {
		bundle, leaf, err := handshake(*addr, *serverName, *caFile)
		if bundle != "" && bundle != lastBundle {
			fmt.Printf("%s bundle %s\n", stamp(), bundle)
			lastBundle = bundle
		}
		if err != nil {
			fmt.Printf("%s FAIL %v\n", stamp(), err)
		} else {
			ok++
			if leaf != lastLeaf {
				fmt.Printf("%s leaf %s\n", stamp(), leaf)
				lastLeaf = leaf
			}
		}
		select {
		case <-report.C:
			fmt.Printf("%s ok %d\n", stamp(), ok)
		default:
		}
		time.Sleep(*interval)
	}
}

func stamp() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// handshake reads the bundle, verifies one handshake with it and returns
// the bundle's and the server certificate's descriptions.
func handshake(addr, serverName, caFile string) (bundle, leaf string, _ error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return "", "", err
	}
	pool := x509.NewCertPool()
	var names []string
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", caFile, err)
		}
		pool.AddCert(c)
		names = append(names, fingerprint(c))
	}
	bundle = strings.Join(names, ",")
	if len(names) == 0 {
		return bundle, "", fmt.Errorf("%s holds no certificate", caFile)
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(dialer, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12})
	if err != nil {
		return bundle, "", err
	}
	defer func() { _ = conn.Close() }()
	chain := conn.ConnectionState().VerifiedChains[0]
	return bundle, fmt.Sprintf("%s issuer %s", fingerprint(chain[0]), fingerprint(chain[len(chain)-1])), nil
}

// fingerprint is signing.Fingerprint's format: SHA256:<hex of the DER>.
func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return "SHA256:" + hex.EncodeToString(sum[:])
}

// watchCredentials checks the credential bundle and the trust bundle
// every second, reading both afresh (the kubelet replaces them in place
// when it refreshes the certificate), and prints each newly verified
// certificate once and each new failure once.
func watchCredentials(bundleFile, trustFile, spiffe string) {
	fmt.Printf("%s watching %s with %s for %s\n", stamp(), bundleFile, trustFile, spiffe)
	var lastOK, lastFail string
	for {
		line, err := checkCredentials(bundleFile, trustFile, spiffe)
		switch {
		case err != nil && err.Error() != lastFail:
			lastFail = err.Error()
			fmt.Printf("%s FAIL %v\n", stamp(), err)
		case err == nil && line != lastOK:
			lastOK, lastFail = line, ""
			fmt.Printf("%s VERIFIED %s\n", stamp(), line)
		}
		time.Sleep(time.Second)
	}
}

// checkCredentials returns a description of the bundle's leaf if every
// check passes.
func checkCredentials(bundleFile, trustFile, spiffe string) (string, error) {
	data, err := os.ReadFile(bundleFile)
	if err != nil {
		return "", err
	}
	trust, err := os.ReadFile(trustFile)
	if err != nil {
		return "", err
	}
	var key any
	var chain []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		switch block.Type {
		case "PRIVATE KEY":
			if key != nil {
				return "", fmt.Errorf("%s: two private keys", bundleFile)
			}
			if key, err = x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
				return "", fmt.Errorf("%s: the key: %w", bundleFile, err)
			}
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return "", fmt.Errorf("%s: certificate %d: %w", bundleFile, len(chain), err)
			}
			chain = append(chain, c)
		default:
			return "", fmt.Errorf("%s: unexpected PEM block %q", bundleFile, block.Type)
		}
	}
	if key == nil || len(chain) == 0 {
		return "", fmt.Errorf("%s: %d keys, %d certificates", bundleFile, boolInt(key != nil), len(chain))
	}
	leaf := chain[0]
	signer, ok := key.(interface{ Public() crypto.PublicKey })
	if !ok {
		return "", fmt.Errorf("%s: a %T key has no public key", bundleFile, key)
	}
	pub, err := x509.MarshalPKIXPublicKey(signer.Public())
	if err != nil {
		return "", err
	}
	if !bytes.Equal(pub, leaf.RawSubjectPublicKeyInfo) {
		return "", errors.New("the key is not the leaf's")
	}
	roots := x509.NewCertPool()
	var rootNames []string
	for rest := trust; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", fmt.Errorf("%s: %w", trustFile, err)
		}
		roots.AddCert(c)
		rootNames = append(rootNames, fingerprint(c))
	}
	if len(rootNames) == 0 {
		return "", fmt.Errorf("%s holds no certificate", trustFile)
	}
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	verified, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return "", fmt.Errorf("verifying the leaf (serial %s) with the trust bundle %s: %w", leaf.SerialNumber, strings.Join(rootNames, ","), err)
	}
	if want, got := spiffe, uris(leaf.URIs); got != want {
		return "", fmt.Errorf("the leaf's URI SANs are %q, want %q", got, want)
	}
	issuer := verified[0][len(verified[0])-1]
	return fmt.Sprintf("serial=%s uri=%s issuer=%s notBefore=%s notAfter=%s", leaf.SerialNumber, uris(leaf.URIs), fingerprint(issuer),
		leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339)), nil
}

func uris(us []*url.URL) string {
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = u.String()
	}
	return strings.Join(s, ",")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
