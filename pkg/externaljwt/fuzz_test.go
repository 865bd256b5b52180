package externaljwt

import (
	"encoding/base64"
	"testing"

	externaljwtv1 "k8s.io/externaljwt/apis/v1"
	"k8s.io/klog/v2/ktesting"
)

// FuzzSign feeds arbitrary claims to Sign: it must never panic, and what it
// signs must be valid claims with a signature that verifies.
func FuzzSign(f *testing.F) {
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:default:default","exp":1700003600}`)))
	f.Add("")
	f.Add("eyJ!!!")
	f.Add(base64.URLEncoding.EncodeToString([]byte(`{"a":1}`)))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`null`)))
	ec, _ := testKeys(f)
	ks := keySet("k", ES256, ec)
	srv, err := NewServer(&fakeSource{ks: ks}, Options{MaxTokenExpiration: MinMaxTokenExpiration})
	if err != nil {
		f.Fatal(err)
	}
	keys, err := fetchKeysResponse(ks)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, claims string) {
		_, ctx := ktesting.NewTestContext(t)
		resp, err := srv.Sign(ctx, &externaljwtv1.SignJWTRequest{Claims: claims})
		if err != nil {
			return
		}
		if checkClaims(claims) != nil {
			t.Fatalf("signed claims checkClaims refuses: %q", claims)
		}
		verifyJWT(t, resp.Header+"."+claims+"."+resp.Signature, keys.Keys)
	})
}
