// Command tlsprobe is the install test's TLS client in a pod: it completes
// a TLS handshake with a server again and again, verifying the server's
// certificate with a CA bundle file (a mounted ConfigMap that rekey
// publishes), read afresh before every handshake since the kubelet
// replaces the file in place. Every failed handshake is a line starting
// with FAIL; a change of the bundle or of the server's certificate is a
// line of its own; every few seconds a line says how many handshakes
// succeeded. It never exits by itself: the test reads its log.
package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", "", "the server's host:port")
	serverName := flag.String("server-name", "", "the DNS name the server's certificate must have")
	caFile := flag.String("ca", "", "the PEM bundle to verify the server with")
	interval := flag.Duration("interval", 200*time.Millisecond, "time between handshakes")
	flag.Parse()
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
