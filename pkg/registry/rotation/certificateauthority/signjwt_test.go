package certificateauthority

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/pkg/signing"
)

var signNow = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func claimsOf(t testing.TB, v string) string {
	t.Helper()
	return base64.RawURLEncoding.EncodeToString([]byte(v))
}

// kubeClaims are claims as kube-apiserver sends them, iat at now.
func kubeClaims(iat, exp int64) string {
	return fmt.Sprintf(`{"aud":["https://kubernetes.default.svc"],"exp":%d,"iat":%d,"iss":"https://issuer.example","jti":"x","kubernetes.io":{"namespace":"a"},"nbf":%d,"sub":"system:serviceaccount:a:b"}`, exp, iat, iat)
}

// Each rule refuses with a message naming it, never the claims.
func TestCheckClaims(t *testing.T) {
	now := signNow.Unix()
	hour := &metav1.Duration{Duration: time.Hour}
	withIssuer := &rotation.ServiceAccountTokenKeys{MaxTokenExpiration: hour, Issuer: "https://issuer.example"}
	noIssuer := &rotation.ServiceAccountTokenKeys{MaxTokenExpiration: hour}
	for _, tc := range []struct {
		name   string
		claims string // JSON, encoded by the test unless raw
		raw    bool
		keys   *rotation.ServiceAccountTokenKeys
		want   string // "" accepts
	}{
		{name: "kube-apiserver's", claims: kubeClaims(now, now+3600), keys: withIssuer},
		{name: "no issuer configured takes any iss", claims: strings.Replace(kubeClaims(now, now+600), "issuer.example", "other.example", 1), keys: noIssuer},
		{name: "nil keys default to 24h", claims: `{"iat":` + fmt.Sprint(now) + `,"exp":` + fmt.Sprint(now+86400) + `}`},
		{name: "iat a minute early", claims: kubeClaims(now-60, now+3000), keys: withIssuer},
		{name: "iat a minute ahead, max lifetime", claims: kubeClaims(now+60, now+60+3600), keys: withIssuer},
		{name: "not base64url", claims: "eyJ!!", raw: true, keys: noIssuer, want: "not unpadded base64url"},
		{name: "empty", claims: "", raw: true, keys: noIssuer, want: "must not be empty"},
		{name: "not an object", claims: `[1,2]`, keys: noIssuer, want: "not a JSON object"},
		{name: "no exp", claims: fmt.Sprintf(`{"iat":%d}`, now), keys: noIssuer, want: `"exp" is missing`},
		{name: "no iat", claims: fmt.Sprintf(`{"exp":%d}`, now), keys: noIssuer, want: `"iat" is missing`},
		{name: "exp a string", claims: fmt.Sprintf(`{"iat":%d,"exp":"%d"}`, now, now+60), keys: noIssuer, want: `"exp" must be an integer`},
		{name: "exp a fraction", claims: fmt.Sprintf(`{"iat":%d,"exp":%d.5}`, now, now+60), keys: noIssuer, want: `"exp" must be an integer`},
		{name: "iat an exponent", claims: `{"iat":1.7e9,"exp":1800000000}`, keys: noIssuer, want: `"iat" must be an integer`},
		{name: "exp beyond int64", claims: fmt.Sprintf(`{"iat":%d,"exp":99999999999999999999}`, now), keys: noIssuer, want: `"exp" must be an integer`},
		{name: "exp at iat", claims: kubeClaims(now, now), keys: withIssuer, want: `"exp" (` + fmt.Sprint(now) + `) must be after "iat"`},
		{name: "lifetime over the max", claims: kubeClaims(now, now+3601), keys: withIssuer, want: "3601 s, more than spec.serviceAccountTokens.maxTokenExpiration (1h0m0s)"},
		{name: "huge lifetime does not wrap", claims: fmt.Sprintf(`{"iat":%d,"exp":9223372036854775807}`, now), keys: noIssuer, want: "more than spec.serviceAccountTokens.maxTokenExpiration"},
		{name: "iat too old", claims: kubeClaims(now-61, now+60), keys: withIssuer, want: `"iat" (` + fmt.Sprint(now-61) + `) is more than 1m0s from the server's clock`},
		{name: "iat in the future", claims: kubeClaims(now+61, now+600), keys: withIssuer, want: "is more than 1m0s from the server's clock"},
		{name: "clock two minutes ahead", claims: kubeClaims(now+120, now+120+3600), keys: withIssuer, want: `"iat" (` + fmt.Sprint(now+120) + `) is more than 1m0s from the server's clock`},
		{name: "wrong iss", claims: strings.Replace(kubeClaims(now, now+60), "issuer.example", "evil.example", 1), keys: withIssuer, want: `"iss" must be spec.serviceAccountTokens.issuer "https://issuer.example"`},
		{name: "no iss", claims: fmt.Sprintf(`{"iat":%d,"exp":%d}`, now, now+60), keys: withIssuer, want: `"iss" is missing`},
		{name: "case-variant EXP", claims: fmt.Sprintf(`{"iss":"https://issuer.example","iat":%d,"exp":%d,"EXP":%d}`, now, now+600, now+1e9), keys: withIssuer, want: `"EXP" and "exp" differ only in case`},
		{name: "lone case-variant Exp", claims: fmt.Sprintf(`{"iss":"https://issuer.example","iat":%d,"Exp":%d}`, now, now+600), keys: withIssuer, want: `"Exp" is a case variant of the registered claim "exp"`},
		{name: "duplicate exp", claims: fmt.Sprintf(`{"iss":"https://issuer.example","iat":%d,"exp":%d,"exp":%d}`, now, now+600, now+60), keys: withIssuer, want: `duplicate member "exp"`},
		{name: "nbf after exp", claims: fmt.Sprintf(`{"iss":"https://issuer.example","iat":%d,"exp":%d,"nbf":%d}`, now, now+600, now+601), keys: withIssuer, want: `"nbf" (` + fmt.Sprint(now+601) + `) must not be after "exp"`},
		{name: "nbf at exp", claims: fmt.Sprintf(`{"iss":"https://issuer.example","iat":%d,"exp":%d,"nbf":%d}`, now, now+600, now+600), keys: withIssuer},
		{name: "nbf a string", claims: fmt.Sprintf(`{"iss":"https://issuer.example","iat":%d,"exp":%d,"nbf":"%d"}`, now, now+600, now), keys: withIssuer, want: `"nbf" must be an integer`},
		{name: "iss not a string", claims: fmt.Sprintf(`{"iat":%d,"exp":%d,"iss":1}`, now, now+60), keys: withIssuer, want: `"iss" must be a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := tc.claims
			if !tc.raw {
				claims = claimsOf(t, claims)
			}
			got, err := CheckClaims(claims, tc.keys, signNow)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v (%+v), want an error containing %q", err, got, tc.want)
			}
			if strings.Contains(err.Error(), "system:serviceaccount") || (claims != "" && strings.Contains(err.Error(), claims)) {
				t.Fatalf("the error echoes the claims: %v", err)
			}
		})
	}
}

// TestCheckClaimsClockTolerance: one tolerance for clocks. kube-apiserver
// extends projected tokens to exactly maxTokenExpiration (exp = iat +
// max), so every iat the skew rule accepts must come with such an exp
// accepted too, and every other iat is refused for iat, not for exp.
func TestCheckClaimsClockTolerance(t *testing.T) {
	const max = time.Hour
	keys := &rotation.ServiceAccountTokenKeys{MaxTokenExpiration: &metav1.Duration{Duration: max}, Issuer: "https://issuer.example"}
	now := signNow.Unix()
	skew := int64(jwtkey.ClockSkew / time.Second)
	if jwtkey.ExpiryLeeway < jwtkey.ClockSkew {
		t.Fatalf("ExpiryLeeway %s < ClockSkew %s: a token of the longest lifetime from a clock ahead is refused", jwtkey.ExpiryLeeway, jwtkey.ClockSkew)
	}
	for iat := now - skew - 5; iat <= now+skew+5; iat++ {
		_, err := CheckClaims(claimsOf(t, kubeClaims(iat, iat+int64(max/time.Second))), keys, signNow)
		inSkew := iat >= now-skew && iat <= now+skew
		if inSkew && err != nil {
			t.Fatalf("iat now%+ds, exp = iat + max: refused: %v", iat-now, err)
		}
		if !inSkew && (err == nil || !strings.Contains(err.Error(), `"iat"`)) {
			t.Fatalf("iat now%+ds: got %v, want the iat rule's refusal", iat-now, err)
		}
	}
}

type fakeGetter map[string]*rotation.CertificateAuthority

func (f fakeGetter) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ca, ok := f[name]
	if !ok {
		return nil, apierrors.NewNotFound(rotation.Resource("certificateauthorities"), name)
	}
	return ca.DeepCopy(), nil
}

type fakeKeys struct {
	auth *authority.Authority
	err  error
}

func (f fakeKeys) Get(context.Context, string) (*authority.Authority, error) { return f.auth, f.err }
func (f fakeKeys) Forget(string)                                             {}

// cacheKeys is an authority.Authorities whose cache hands out cached until
// Forget, then fresh: what the binding says.
type cacheKeys struct {
	cached, fresh *authority.Authority
	forgets       int
}

func (c *cacheKeys) Get(context.Context, string) (*authority.Authority, error) { return c.cached, nil }
func (c *cacheKeys) Forget(string)                                             { c.forgets++; c.cached = c.fresh }

// selfSigned is a CA certificate wrapping key, as a binding holds one.
func selfSigned(t *testing.T, key *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: signNow.Add(-time.Hour), NotAfter: signNow.Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func newAuthority(t *testing.T) *authority.Authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &authority.Authority{Name: "sa", UID: "uid-1", Cert: selfSigned(t, key), Signer: key}
}

// TestSignJWTSignsOnlyWithStatusKeys (review finding 2): the key cache of
// a replica may lag the promotion; signjwt never signs with the key the
// CertificateAuthority calls previous, nor with one it does not name. It
// forgets the cached key and asks the binding once, then answers 503.
func TestSignJWTSignsOnlyWithStatusKeys(t *testing.T) {
	oldKey, newKey, otherKey := newAuthority(t), newAuthority(t), newAuthority(t)
	kidOf := func(a *authority.Authority) string {
		kid, err := jwtkey.KeyID(a.Cert.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		return kid
	}
	entry := func(a *authority.Authority) *rotation.CACertificate {
		return &rotation.CACertificate{Fingerprint: signing.Fingerprint(a.Cert), TokenKeyID: kidOf(a)}
	}
	prepared := saCA("sa")
	prepared.UID = "uid-1"
	prepared.Status.Phase, prepared.Status.Current, prepared.Status.Previous = rotation.PhasePrepared, entry(newKey), entry(oldKey)
	preparing := saCA("sa")
	preparing.UID = "uid-1"
	preparing.Status.Phase, preparing.Status.Current, preparing.Status.Next = rotation.PhasePreparing, entry(oldKey), entry(newKey)
	recreated := prepared.DeepCopy()
	recreated.UID = "uid-2"
	now := signNow.Unix()
	claims := claimsOf(t, kubeClaims(now, now+3600))

	for _, tc := range []struct {
		name          string
		ca            *rotation.CertificateAuthority
		cached, fresh *authority.Authority
		wantKid       string // "": a 503
		wantForgets   int
	}{
		{name: "Prepared, cache current", ca: prepared, cached: newKey, fresh: newKey, wantKid: kidOf(newKey)},
		{name: "Prepared, cache behind, binding current", ca: prepared, cached: oldKey, fresh: newKey, wantKid: kidOf(newKey), wantForgets: 1},
		{name: "Prepared, still the previous key", ca: prepared, cached: oldKey, fresh: oldKey, wantForgets: 1},
		{name: "a key status does not name", ca: prepared, cached: otherKey, fresh: otherKey, wantForgets: 1},
		{name: "Preparing, the old key signs", ca: preparing, cached: oldKey, fresh: oldKey, wantKid: kidOf(oldKey)},
		{name: "promoted in the binding before status says so", ca: preparing, cached: newKey, fresh: newKey, wantKid: kidOf(newKey)},
		{name: "the key of a CA of the same name deleted since", ca: recreated, cached: newKey, fresh: newKey, wantForgets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := &cacheKeys{cached: tc.cached, fresh: tc.fresh}
			r := NewSignJWTREST(fakeGetter{"sa": tc.ca}, keys, clocktesting.NewFakePassiveClock(signNow))
			before, _ := testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues("sa", "", signResultUnavailable))
			obj, err := r.Create(context.Background(), "sa", &rotation.JWTSignRequest{Claims: claims}, nil, &metav1.CreateOptions{})
			if keys.forgets != tc.wantForgets {
				t.Errorf("Forget called %d times, want %d", keys.forgets, tc.wantForgets)
			}
			if tc.wantKid == "" {
				if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "this replica's key cache is behind") {
					t.Fatalf("got %v (%+v), want a 503 saying the key cache is behind", err, obj)
				}
				if after, _ := testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues("sa", "", signResultUnavailable)); after != before+1 {
					t.Fatalf("signatures_total{result=unavailable} went from %v to %v", before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := obj.(*rotation.JWTSignRequest).KeyID; got != tc.wantKid {
				t.Fatalf("signed with kid %s, want %s", got, tc.wantKid)
			}
		})
	}
}

// saCA is a Ready ServiceAccountTokens CA; its current key is a made-up
// fingerprint unless the test names one.
func saCA(name string) *rotation.CertificateAuthority {
	return &rotation.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: rotation.CertificateAuthoritySpec{Purpose: rotation.PurposeServiceAccountTokens,
			ServiceAccountTokens: &rotation.ServiceAccountTokenKeys{MaxTokenExpiration: &metav1.Duration{Duration: time.Hour}, Issuer: "https://issuer.example"}},
		Status: rotation.CertificateAuthorityStatus{
			Current:    &rotation.CACertificate{Fingerprint: "f"},
			Conditions: []metav1.Condition{{Type: rotation.CertificateAuthorityReady, Status: metav1.ConditionTrue, Reason: "KeyAvailable"}},
		},
	}
}

// saCAOf is saCA("sa") whose current key is auth's.
func saCAOf(auth *authority.Authority) *rotation.CertificateAuthority {
	ca := saCA("sa")
	ca.Status.Current.Fingerprint = signing.Fingerprint(auth.Cert)
	return ca
}

// verifyES256 checks a JWS made by jwtkey.Sign against pub.
func verifyES256(t *testing.T, pub *ecdsa.PublicKey, hdr, claims, sig string) {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(raw) != 64 {
		t.Fatalf("signature %q: %v", sig, err)
	}
	digest := sha256.Sum256([]byte(hdr + "." + claims))
	if !ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(raw[:32]), new(big.Int).SetBytes(raw[32:])) {
		t.Fatal("the signature does not verify with the CA's key")
	}
}

func TestSignJWT(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := &authority.Authority{Name: "sa", Cert: selfSigned(t, key), Signer: key}
	kid, _ := jwtkey.KeyID(&key.PublicKey)
	now := signNow.Unix()
	good := claimsOf(t, kubeClaims(now, now+3600))

	notReady := saCAOf(auth)
	notReady.Status.Conditions[0].Status, notReady.Status.Conditions[0].Reason, notReady.Status.Conditions[0].Message = metav1.ConditionFalse, "KeyUnavailable", "the PKCS#11 token is gone"
	noCurrent := saCAOf(auth)
	noCurrent.Status.Current = nil
	certs := saCAOf(auth)
	certs.Spec.Purpose, certs.Spec.ServiceAccountTokens = rotation.PurposeCertificates, nil
	unset := saCAOf(auth)
	unset.Spec.Purpose = ""

	for _, tc := range []struct {
		name   string
		ca     *rotation.CertificateAuthority
		keys   fakeKeys
		claims string
		dryRun bool
		check  func(error) bool
		want   string
		result string // the metric's result label
	}{
		{name: "dry run", ca: saCAOf(auth), claims: good, dryRun: true, check: apierrors.IsBadRequest, want: "does not support dryRun"},
		{name: "no such CA", claims: good, check: apierrors.IsNotFound, want: "not found"},
		{name: "Certificates CA", ca: certs, claims: good, check: apierrors.IsBadRequest, result: signResultRefused,
			want: `CertificateAuthority "sa" signs certificates (spec.purpose Certificates), not service-account tokens`},
		{name: "purpose unset is Certificates", ca: unset, claims: good, check: apierrors.IsBadRequest, result: signResultRefused, want: "(spec.purpose Certificates)"},
		{name: "bad claims", ca: saCAOf(auth), claims: claimsOf(t, kubeClaims(now, now+7200)), check: apierrors.IsInvalid, result: signResultRefused,
			want: "claims: Invalid value: \"exp\" - \"iat\" is 7200 s, more than spec.serviceAccountTokens.maxTokenExpiration (1h0m0s)"},
		{name: "not Ready", ca: notReady, claims: good, check: apierrors.IsServiceUnavailable, result: signResultUnavailable,
			want: `CertificateAuthority "sa" is not Ready (KeyUnavailable): the PKCS#11 token is gone`},
		{name: "no current key", ca: noCurrent, claims: good, check: apierrors.IsServiceUnavailable, result: signResultUnavailable, want: "is not Ready: it has no current key yet"},
		{name: "key unavailable", ca: saCAOf(auth), keys: fakeKeys{err: errors.New(`CertificateAuthority "sa" has no key yet`)}, claims: good,
			check: apierrors.IsServiceUnavailable, result: signResultUnavailable, want: "has no usable key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cas := fakeGetter{}
			if tc.ca != nil {
				cas[tc.ca.Name] = tc.ca
			}
			keys := tc.keys
			if keys.auth == nil && keys.err == nil {
				keys.auth = auth
			}
			r := NewSignJWTREST(cas, keys, clocktesting.NewFakePassiveClock(signNow))
			opts := &metav1.CreateOptions{}
			if tc.dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			var before float64
			if tc.result != "" {
				before, _ = testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues("sa", "", tc.result))
			}
			_, err := r.Create(context.Background(), "sa", &rotation.JWTSignRequest{Claims: tc.claims}, nil, opts)
			if !tc.check(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), tc.claims) {
				t.Fatalf("the error echoes the claims: %v", err)
			}
			if tc.result != "" {
				if after, _ := testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues("sa", "", tc.result)); after != before+1 {
					t.Fatalf("signatures_total{result=%q} went from %v to %v", tc.result, before, after)
				}
			}
		})
	}

	t.Run("signs", func(t *testing.T) {
		var validated bool
		validate := func(_ context.Context, obj runtime.Object) error {
			validated = obj.(*rotation.JWTSignRequest).Claims == good
			return nil
		}
		r := NewSignJWTREST(fakeGetter{"sa": saCAOf(auth)}, fakeKeys{auth: auth}, clocktesting.NewFakePassiveClock(signNow))
		before, _ := testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues("sa", kid, signResultSigned))
		obj, err := r.Create(context.Background(), "sa", &rotation.JWTSignRequest{Claims: good}, validate, &metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !validated {
			t.Fatal("admission did not see the request")
		}
		got := obj.(*rotation.JWTSignRequest)
		if got.KeyID != kid || got.Claims != "" {
			t.Fatalf("answer %+v: want kid %s and no claims", got, kid)
		}
		hdrJSON, _ := base64.RawURLEncoding.DecodeString(got.Header)
		var hdr map[string]string
		if err := json.Unmarshal(hdrJSON, &hdr); err != nil || hdr["alg"] != "ES256" || hdr["kid"] != kid || hdr["typ"] != "JWT" || len(hdr) != 3 {
			t.Fatalf("header %s: %v", hdrJSON, err)
		}
		verifyES256(t, &key.PublicKey, got.Header, good, got.Signature)
		if after, _ := testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues("sa", kid, signResultSigned)); after != before+1 {
			t.Fatalf("signatures_total{result=signed} went from %v to %v", before, after)
		}
	})

	t.Run("admission refusal stops it", func(t *testing.T) {
		r := NewSignJWTREST(fakeGetter{"sa": saCAOf(auth)}, fakeKeys{auth: auth}, clocktesting.NewFakePassiveClock(signNow))
		deny := func(context.Context, runtime.Object) error {
			return apierrors.NewForbidden(rotation.Resource("certificateauthorities"), "sa", errors.New("no"))
		}
		if _, err := r.Create(context.Background(), "sa", &rotation.JWTSignRequest{Claims: good}, deny, &metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("got %v", err)
		}
	})
}
