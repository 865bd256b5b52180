package jwtsigner

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
)

// testKey is a CA key pair with its kid and certificate fingerprint.
type testKey struct {
	kp  *pki.KeyPair
	kid string
	fp  string
}

func mkKey(t *testing.T, name string) *testKey {
	t.Helper()
	kp, err := pki.NewCA(name, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kid, err := jwtkey.KeyID(kp.Cert.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return &testKey{kp: kp, kid: kid, fp: signing.Fingerprint(kp.Cert)}
}

func (k *testKey) cert() *rotationv1alpha1.CACertificate {
	if k == nil {
		return nil
	}
	return &rotationv1alpha1.CACertificate{Certificate: string(k.kp.CertPEM()), Fingerprint: k.fp, TokenKeyID: k.kid}
}

// legacyKey is a public key of a key-file signer: its PEM and kid.
func legacyKey(t *testing.T) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	kid, err := jwtkey.KeyID(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), kid
}

// saCA is a ServiceAccountTokens CA named sa with these keys.
func saCA(current, next, previous *testKey, legacy ...rotationv1alpha1.LegacyPublicKey) *rotationv1alpha1.CertificateAuthority {
	return &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "sa"},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{
			Purpose: rotationv1alpha1.PurposeServiceAccountTokens,
			ServiceAccountTokens: &rotationv1alpha1.ServiceAccountTokenKeys{
				MaxTokenExpiration: &metav1.Duration{Duration: time.Hour},
				LegacyPublicKeys:   legacy,
			},
		},
		Status: rotationv1alpha1.CertificateAuthorityStatus{Current: current.cert(), Next: next.cert(), Previous: previous.cert()},
	}
}

// kids is the set's keys as "kid/state".
func kids(set *Set) []string {
	var out []string
	for _, k := range set.Keys {
		out = append(out, k.KeyID+"/"+string(k.State))
	}
	return out
}

func TestFromCA(t *testing.T) {
	a, b, c := mkKey(t, "a"), mkKey(t, "b"), mkKey(t, "c")
	now := time.Now()
	legacyPEM, legacyKID := legacyKey(t)
	expiredPEM, _ := legacyKey(t)
	ca := saCA(b, c, a,
		rotationv1alpha1.LegacyPublicKey{PublicKey: legacyPEM, ExpireTime: metav1.NewTime(now.Add(time.Hour))},
		rotationv1alpha1.LegacyPublicKey{PublicKey: expiredPEM, ExpireTime: metav1.NewTime(now.Add(-time.Second))},
		// The CA's own key as a legacy key too: served once, as the CA's.
		rotationv1alpha1.LegacyPublicKey{PublicKey: publicPEM(t, a), ExpireTime: metav1.NewTime(now.Add(time.Hour))},
	)
	set, err := FromCA(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{b.kid + "/current", c.kid + "/next", a.kid + "/previous", legacyKID + "/legacy"}
	if got := kids(set); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("keys %v, want %v", got, want)
	}
	if set.Keys[0].Fingerprint != b.fp || set.Keys[3].Fingerprint != "" || set.Keys[3].ExpireTime == nil {
		t.Errorf("fingerprints and expireTime: %+v", set.Keys)
	}
	if set.MaxTokenExpirationSeconds != 3600 {
		t.Errorf("maxTokenExpirationSeconds %d, want 3600", set.MaxTokenExpirationSeconds)
	}
	ks := set.keySet(now, time.Minute)
	for _, k := range ks.Keys {
		if k.ExcludeFromOIDCDiscovery != (k.KeyID == legacyKID) {
			t.Errorf("kid %s excluded from discovery: %v", k.KeyID, k.ExcludeFromOIDCDiscovery)
		}
	}
	if !set.signs(b.kid) || !set.signs(c.kid) || set.signs(legacyKID) || set.signs("nope") {
		t.Error("signs: only the CA's keys sign")
	}

	for name, tc := range map[string]struct {
		mutate func(*rotationv1alpha1.CertificateAuthority)
		want   string
	}{
		"certificates CA": {func(ca *rotationv1alpha1.CertificateAuthority) {
			ca.Spec.Purpose = rotationv1alpha1.PurposeCertificates
		}, "signs certificates"},
		"no current":        {func(ca *rotationv1alpha1.CertificateAuthority) { ca.Status.Current = nil }, "no current key"},
		"wrong fingerprint": {func(ca *rotationv1alpha1.CertificateAuthority) { ca.Status.Next.Fingerprint = a.fp }, "status.next: fingerprint"},
		"wrong tokenKeyID":  {func(ca *rotationv1alpha1.CertificateAuthority) { ca.Status.Current.TokenKeyID = a.kid }, "status.current: tokenKeyID"},
		"bad certificate":   {func(ca *rotationv1alpha1.CertificateAuthority) { ca.Status.Previous.Certificate = "nope" }, "status.previous: certificate"},
		"bad legacy key": {func(ca *rotationv1alpha1.CertificateAuthority) {
			ca.Spec.ServiceAccountTokens.LegacyPublicKeys[0].PublicKey = "x"
		}, "legacyPublicKeys[0]"},
		"short max expiration": {func(ca *rotationv1alpha1.CertificateAuthority) {
			ca.Spec.ServiceAccountTokens.MaxTokenExpiration.Duration = time.Minute
		}, "maxTokenExpiration"},
	} {
		t.Run(name, func(t *testing.T) {
			ca := ca.DeepCopy()
			tc.mutate(ca)
			if _, err := FromCA(ca, now); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("FromCA = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func publicPEM(t *testing.T, k *testKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k.kp.Cert.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func TestCacheFile(t *testing.T) {
	a, b := mkKey(t, "a"), mkKey(t, "b")
	legacyPEM, _ := legacyKey(t)
	now := time.Now()
	set, err := FromCA(saCA(a, b, nil, rotationv1alpha1.LegacyPublicKey{PublicKey: legacyPEM, ExpireTime: metav1.NewTime(now.Add(time.Hour))}), now)
	if err != nil {
		t.Fatal(err)
	}
	set.DataTimestamp = now.UTC()
	path := filepath.Join(t.TempDir(), "sub", "keys.json")
	if err := WriteCache(path, set); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("cache file: %v, %v; want mode 0644", fi, err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "PRIVATE") {
		t.Fatal("the cache file holds a private key")
	}
	got, err := ReadCache(path, "sa")
	if err != nil {
		t.Fatal(err)
	}
	if !sameKeys(got, set) || !got.DataTimestamp.Equal(set.DataTimestamp) {
		t.Fatalf("read back %+v, want %+v", got, set)
	}
	for _, k := range got.Keys {
		if k.pub == nil {
			t.Errorf("kid %s: public key not parsed", k.KeyID)
		}
	}

	if got, err := ReadCache(filepath.Join(t.TempDir(), "missing"), "sa"); got != nil || err != nil {
		t.Errorf("a missing cache: %v, %v; want nothing and no error", got, err)
	}
	if _, err := ReadCache(path, "other"); err == nil || !strings.Contains(err.Error(), "certificateAuthority") {
		t.Errorf("another CA's cache: %v", err)
	}
	bad := func(name, content string, want string) {
		t.Helper()
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadCache(p, "sa"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", name, err, want)
		}
	}
	bad("garbage", "{not json", "invalid character")
	bad("oversized", `{"keys":[`+strings.Repeat(" ", MaxCacheFileSize)+`]}`, "larger than")
	bad("trailing", string(data)+"{}", "trailing data")
	bad("kid mismatch", strings.Replace(string(data), a.kid, b.kid, 1), "is not the key's kid")
	bad("no current", strings.Replace(string(data), `"current"`, `"previous"`, 1), "0 current keys")
	bad("bad state", strings.Replace(string(data), `"next"`, `"upcoming"`, 1), "state")
	bad("short max", strings.Replace(string(data), `"maxTokenExpirationSeconds": 3600`, `"maxTokenExpirationSeconds": 60`, 1), "maxTokenExpirationSeconds")
	bad("empty", `{"certificateAuthority":"sa","maxTokenExpirationSeconds":3600,"dataTimestamp":"2026-01-01T00:00:00Z","keys":[]}`, "keys: 0")
}
