package externaljwt

import (
	"context"
	"encoding/base64"
	"testing"

	externaljwtv1 "k8s.io/externaljwt/apis/v1"
	"k8s.io/klog/v2/ktesting"

	"rekey.io/rekey/pkg/jwtkey"
)

// FuzzSign feeds arbitrary claims to Sign: it must never panic, it hands
// the Signer only claims jwtkey.DecodeClaims accepts, and what it answers
// is a token that verifies with the keys FetchKeys serves.
func FuzzSign(f *testing.F) {
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:default:default","exp":1700003600}`)))
	f.Add("")
	f.Add("eyJ!!!")
	f.Add(base64.URLEncoding.EncodeToString([]byte(`{"a":1}`)))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`null`)))
	ec, _ := testKeys(f)
	ks := keySet("k", ec)
	signer := &checkingSigner{localSigner: localSigner{kid: "k", signer: ec}}
	srv, err := NewServer(&fakeSource{ks: ks}, signer, Options{})
	if err != nil {
		f.Fatal(err)
	}
	keys, err := FetchKeysResponse(ks)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, claims string) {
		_, ctx := ktesting.NewTestContext(t)
		signer.t = t
		resp, err := srv.Sign(ctx, &externaljwtv1.SignJWTRequest{Claims: claims})
		if err != nil {
			return
		}
		if _, err := jwtkey.DecodeClaims(claims); err != nil {
			t.Fatalf("signed claims DecodeClaims refuses: %q: %v", claims, err)
		}
		verifyJWT(t, resp.Header+"."+claims+"."+resp.Signature, keys.Keys)
	})
}

// checkingSigner fails the test when it is handed claims DecodeClaims
// refuses: Sign must have refused them first.
type checkingSigner struct {
	localSigner
	t *testing.T
}

func (c *checkingSigner) SignJWT(ctx context.Context, claims string) (string, string, string, error) {
	if _, err := jwtkey.DecodeClaims(claims); err != nil {
		c.t.Fatalf("the Signer was handed claims DecodeClaims refuses: %q: %v", claims, err)
	}
	return c.localSigner.SignJWT(ctx, claims)
}
