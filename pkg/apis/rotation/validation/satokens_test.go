package validation

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/jwtkey"
)

func pemBlock(t *testing.T, typ string, der []byte) string {
	t.Helper()
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

// testKeys are an ECDSA P-256 key in PKIX PEM, an RSA-2048 key in PKIX and
// in PKCS#1 PEM (the same key twice), and the ECDSA private key in PEM.
type testKeys struct {
	ec, rsaPKIX, rsaPKCS1, ecPrivate string
}

func newTestKeys(t *testing.T) testKeys {
	t.Helper()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaDER, err := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	return testKeys{
		ec: pemBlock(t, "PUBLIC KEY", ecDER), rsaPKIX: pemBlock(t, "PUBLIC KEY", rsaDER),
		rsaPKCS1: pemBlock(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&rk.PublicKey)), ecPrivate: pemBlock(t, "PRIVATE KEY", privDER),
	}
}

func tokenCA(keys testKeys) *rotation.CertificateAuthority {
	ca := etcdCA()
	ca.Spec.Purpose = rotation.PurposeServiceAccountTokens
	expire := metav1.NewTime(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	ca.Spec.ServiceAccountTokens = &rotation.ServiceAccountTokenKeys{
		MaxTokenExpiration: &metav1.Duration{Duration: 24 * time.Hour},
		Issuer:             "https://kubernetes.default.svc.cluster.local",
		LegacyPublicKeys:   []rotation.LegacyPublicKey{{PublicKey: keys.ec, ExpireTime: expire}, {PublicKey: keys.rsaPKCS1, ExpireTime: expire}},
	}
	return ca
}

func TestServiceAccountTokensCA(t *testing.T) {
	keys := newTestKeys(t)
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	tests := map[string]struct {
		mutate   func(*rotation.CertificateAuthority)
		path     string
		contains string
	}{
		"valid": {mutate: func(*rotation.CertificateAuthority) {}},
		"RSA-4096 in PKCS11": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.KeyAlgorithm = rotation.RSA4096
			c.Spec.KeyStore = rotation.KeyStore{Type: rotation.KeyStorePKCS11, Pkcs11: &rotation.PKCS11KeyStore{ModulePath: "/m.so", TokenLabel: "t", PINFile: "/pin"}}
		}},
		"least maxTokenExpiration": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.MaxTokenExpiration = d(10 * time.Minute)
		}},
		"most maxTokenExpiration": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.MaxTokenExpiration = d(8760 * time.Hour)
		}},
		"no issuer, no legacy keys": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.Issuer, c.Spec.ServiceAccountTokens.LegacyPublicKeys = "", nil
		}},
		"eight legacy keys": {mutate: func(c *rotation.CertificateAuthority) {
			var ks []rotation.LegacyPublicKey
			for range MaxLegacyPublicKeys {
				ks = append(ks, rotation.LegacyPublicKey{PublicKey: newTestKeys(t).ec, ExpireTime: metav1.Now()})
			}
			c.Spec.ServiceAccountTokens.LegacyPublicKeys = ks
		}},

		"no purpose":      {mutate: func(c *rotation.CertificateAuthority) { c.Spec.Purpose = "" }, path: "spec.purpose", contains: `supported values: "Certificates", "ServiceAccountTokens"`},
		"unknown purpose": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.Purpose = "Tokens" }, path: "spec.purpose", contains: "Unsupported value"},
		"P-384": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.KeyAlgorithm = rotation.ECDSAP384 }, path: "spec.keyAlgorithm",
			contains: `Invalid value: "ECDSA-P384": a ServiceAccountTokens key signs ES256 (ECDSA-P256) or RS256 (RSA-2048, RSA-3072, RSA-4096)`},
		"Ed25519": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.KeyAlgorithm = rotation.Ed25519 }, path: "spec.keyAlgorithm", contains: "ES256"},
		"File key store": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.KeyStore = rotation.KeyStore{Type: rotation.KeyStoreFile, File: &rotation.FileKeyStore{CertFile: "/ca.crt", KeyFile: "/ca.key"}}
		}, path: "spec.keyStore.type", contains: "must rotate"},
		"publish": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.Publish = &rotation.Publish{ClusterTrustBundle: true} },
			path: "spec.publish", contains: "never as a CA bundle"},
		"no serviceAccountTokens": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.ServiceAccountTokens = nil },
			path: "spec.serviceAccountTokens", contains: "Required value"},
		"no maxTokenExpiration": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.ServiceAccountTokens.MaxTokenExpiration = nil },
			path: "spec.serviceAccountTokens.maxTokenExpiration", contains: "Required value"},
		"short maxTokenExpiration": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.MaxTokenExpiration = d(9 * time.Minute)
		},
			path: "spec.serviceAccountTokens.maxTokenExpiration", contains: `Invalid value: "9m0s": must be between 10m`},
		"long maxTokenExpiration": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.MaxTokenExpiration = d(8760*time.Hour + time.Second)
		}, path: "spec.serviceAccountTokens.maxTokenExpiration", contains: "8760h"},
		"fractional maxTokenExpiration": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.MaxTokenExpiration = d(time.Hour + time.Millisecond)
		}, path: "spec.serviceAccountTokens.maxTokenExpiration", contains: "whole seconds"},
		"long issuer": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.Issuer = "https://" + strings.Repeat("a", 1020)
		},
			path: "spec.serviceAccountTokens.issuer", contains: "1024"},
		"issuer with a space": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.ServiceAccountTokens.Issuer = "https://a b" },
			path: "spec.serviceAccountTokens.issuer", contains: "whitespace"},
		"issuer with a newline": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.ServiceAccountTokens.Issuer = "https://a\n" },
			path: "spec.serviceAccountTokens.issuer", contains: "whitespace"},
		"nine legacy keys": {mutate: func(c *rotation.CertificateAuthority) {
			for len(c.Spec.ServiceAccountTokens.LegacyPublicKeys) <= MaxLegacyPublicKeys {
				c.Spec.ServiceAccountTokens.LegacyPublicKeys = append(c.Spec.ServiceAccountTokens.LegacyPublicKeys, rotation.LegacyPublicKey{PublicKey: newTestKeys(t).ec, ExpireTime: metav1.Now()})
			}
		}, path: "spec.serviceAccountTokens.legacyPublicKeys", contains: "must have at most 8 items"},
		"legacy key not PEM": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.LegacyPublicKeys[1].PublicKey = "ssh-rsa AAAA"
		},
			path: "spec.serviceAccountTokens.legacyPublicKeys[1].publicKey", contains: "no PEM block"},
		"legacy key two blocks": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.LegacyPublicKeys[0].PublicKey = keys.ec + keys.rsaPKIX
		}, path: "spec.serviceAccountTokens.legacyPublicKeys[0].publicKey", contains: "one key per entry"},
		"legacy private key": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.LegacyPublicKeys[0].PublicKey = keys.ecPrivate
		},
			path: "spec.serviceAccountTokens.legacyPublicKeys[0].publicKey", contains: "never a private key"},
		"legacy key without expireTime": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.LegacyPublicKeys[1].ExpireTime = metav1.Time{}
		}, path: "spec.serviceAccountTokens.legacyPublicKeys[1].expireTime", contains: "Required value"},
		"legacy key twice": {mutate: func(c *rotation.CertificateAuthority) {
			// The same RSA key in PKCS#1 (entry 1) and PKIX: one kid.
			c.Spec.ServiceAccountTokens.LegacyPublicKeys = append(c.Spec.ServiceAccountTokens.LegacyPublicKeys, rotation.LegacyPublicKey{PublicKey: keys.rsaPKIX, ExpireTime: metav1.Now()})
		}, path: "spec.serviceAccountTokens.legacyPublicKeys[2].publicKey", contains: "as spec.serviceAccountTokens.legacyPublicKeys[1]"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ca := tokenCA(keys)
			tc.mutate(ca)
			errs := ValidateCertificateAuthority(ca)
			if tc.path == "" {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			requireMessage(t, errs, tc.path, tc.contains)
			// A key given in spec is never quoted back, whatever it is.
			if msg := errs.ToAggregate().Error(); strings.Contains(msg, "BEGIN") {
				t.Errorf("the message quotes PEM: %s", msg)
			}
		})
	}
}

func TestCertificatesCAHasNoServiceAccountTokens(t *testing.T) {
	ca := etcdCA()
	ca.Spec.ServiceAccountTokens = &rotation.ServiceAccountTokenKeys{MaxTokenExpiration: &metav1.Duration{Duration: time.Hour}}
	requireMessage(t, ValidateCertificateAuthority(ca), "spec.serviceAccountTokens", "only with purpose ServiceAccountTokens")
}

func TestServiceAccountTokensCAUpdate(t *testing.T) {
	keys := newTestKeys(t)
	for name, tc := range map[string]struct {
		mutate         func(*rotation.CertificateAuthority)
		path, contains string
	}{
		"legacy keys may change": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.LegacyPublicKeys = c.Spec.ServiceAccountTokens.LegacyPublicKeys[1:]
			c.Spec.ServiceAccountTokens.LegacyPublicKeys[0].ExpireTime = metav1.NewTime(time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC))
		}},
		"rotation may change": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.Rotation = &rotation.RotationPolicy{TrustPropagation: &metav1.Duration{Duration: time.Minute}}
		}},
		"purpose": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.Purpose, c.Spec.ServiceAccountTokens = rotation.PurposeCertificates, nil
		}, path: "spec.purpose", contains: `Invalid value: "Certificates": field is immutable`},
		"maxTokenExpiration": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.MaxTokenExpiration = &metav1.Duration{Duration: time.Hour}
		}, path: "spec.serviceAccountTokens.maxTokenExpiration", contains: `Invalid value: "1h0m0s": field is immutable`},
		"issuer": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.ServiceAccountTokens.Issuer = "https://other" },
			path: "spec.serviceAccountTokens.issuer", contains: `Invalid value: "https://other": field is immutable`},
		"invalid legacy key added": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.ServiceAccountTokens.LegacyPublicKeys = append(c.Spec.ServiceAccountTokens.LegacyPublicKeys, rotation.LegacyPublicKey{PublicKey: keys.ecPrivate, ExpireTime: metav1.Now()})
		}, path: "spec.serviceAccountTokens.legacyPublicKeys[2].publicKey", contains: "never a private key"},
		"publish added": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.Publish = &rotation.Publish{ClusterTrustBundle: true} },
			path: "spec.publish", contains: "Forbidden"},
	} {
		t.Run(name, func(t *testing.T) {
			old := tokenCA(keys)
			ca := old.DeepCopy()
			tc.mutate(ca)
			errs := ValidateCertificateAuthorityUpdate(ca, old)
			if tc.path == "" {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			requireMessage(t, errs, tc.path, tc.contains)
		})
	}
	// A Certificates CA cannot become a token key either.
	old := etcdCA()
	ca := tokenCA(keys)
	requireMessage(t, ValidateCertificateAuthorityUpdate(ca, old), "spec.purpose", "field is immutable")
}

func TestTokenStatus(t *testing.T) {
	for name, tc := range map[string]struct {
		status rotation.CertificateAuthorityStatus
		path   string
	}{
		"kid of 1024 bytes":      {status: rotation.CertificateAuthorityStatus{Next: &rotation.CACertificate{TokenKeyID: strings.Repeat("k", jwtkey.MaxKeyIDLength)}}},
		"previous tokens expire": {status: rotation.CertificateAuthorityStatus{Previous: &rotation.CACertificate{TokensExpireTime: &metav1.Time{Time: time.Now()}}}},
		"kid too long": {status: rotation.CertificateAuthorityStatus{Current: &rotation.CACertificate{TokenKeyID: strings.Repeat("k", jwtkey.MaxKeyIDLength+1)}},
			path: "status.current.tokenKeyID"},
		"current tokens expire": {status: rotation.CertificateAuthorityStatus{Current: &rotation.CACertificate{TokensExpireTime: &metav1.Time{Time: time.Now()}}},
			path: "status.current.tokensExpireTime"},
	} {
		errs := ValidateCertificateAuthorityStatus(&tc.status, field.NewPath("status"))
		for _, e := range errs {
			// The fixture holds no certificate: only the token fields count.
			if strings.HasSuffix(e.Field, ".certificate") {
				continue
			}
			if tc.path == "" || e.Field != tc.path {
				t.Errorf("%s: %v", name, e)
			}
		}
		if tc.path != "" && !hasError(errs, tc.path, "") {
			t.Errorf("%s: want an error on %s, got %v", name, tc.path, errs)
		}
	}
}

// TestCompleteWaitsForPreviousTokens: a ServiceAccountTokens CA completes
// only once every token of the previous key has expired, unless forced; a
// Certificates CA never waits for tokens.
func TestCompleteWaitsForPreviousTokens(t *testing.T) {
	expire := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ca := tokenCA(newTestKeys(t))
	ca.Status.Phase = rotation.PhasePrepared
	ca.Status.Previous = &rotation.CACertificate{TokenKeyID: "old-kid", TokensExpireTime: &metav1.Time{Time: expire}}
	complete := &rotation.Rotation{Action: rotation.RotationComplete}

	err := CheckTransition(ca, complete, expire.Add(-time.Second))
	want := "cannot Complete: tokens signed by the previous key (kid old-kid) may be valid until 2026-11-25T12:00:00Z " +
		"(spec.serviceAccountTokens.maxTokenExpiration (24h0m0s) after the new key began to sign, plus " + jwtkey.TokenExpiryLeeway.String() + " leeway for clocks and replicas); " +
		"completing now makes kube-apiserver refuse them. Wait until then, or complete with force"
	if err == nil || err.Error() != want {
		t.Fatalf("a second early: %v\nwant %s", err, want)
	}
	if err := CheckTransition(ca, &rotation.Rotation{Action: rotation.RotationComplete, Force: true}, expire.Add(-time.Hour)); err != nil {
		t.Fatalf("forced: %v", err)
	}
	if err := CheckTransition(ca, complete, expire); err != nil {
		t.Fatalf("at tokensExpireTime: %v", err)
	}
	// Start is not held back by the previous rotation's tokens.
	ca.Status.Phase = rotation.PhaseCompleted
	if err := CheckTransition(ca, &rotation.Rotation{Action: rotation.RotationStart}, expire.Add(-time.Hour)); err != nil {
		t.Fatalf("Start: %v", err)
	}

	ca.Status.Phase = rotation.PhasePrepared
	ca.Status.Previous.TokensExpireTime = nil
	if err := CheckTransition(ca, complete, expire.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "status.previous.tokensExpireTime is unset") {
		t.Fatalf("unknown expiry: %v", err)
	}
	if err := CheckTransition(ca, &rotation.Rotation{Action: rotation.RotationComplete, Force: true}, expire); err != nil {
		t.Fatalf("unknown expiry, forced: %v", err)
	}

	certs := etcdCA()
	certs.Status.Phase = rotation.PhasePrepared
	certs.Status.Previous = &rotation.CACertificate{TokensExpireTime: &metav1.Time{Time: expire}}
	if err := CheckTransition(certs, complete, expire.Add(-time.Hour)); err != nil {
		t.Fatalf("Certificates CA: %v", err)
	}
}
