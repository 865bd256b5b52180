package certificateauthority

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/rotation"
)

// FuzzCheckClaims: claims come from whoever may create signjwt; CheckClaims
// reads exp, iat and iss itself (beyond jwtkey.DecodeClaims), so it must
// never panic, and what it accepts must keep its rules when read again
// independently: integer exp and iat, 0 < exp-iat <= the max, iat near now,
// iss the issuer. The seed corpus is in testdata/fuzz/FuzzCheckClaims.
func FuzzCheckClaims(f *testing.F) {
	now := signNow.Unix()
	f.Add(kubeClaims(now, now+3600))
	f.Add(`{"iat":1800000000,"exp":1800000000.0,"iss":"https://issuer.example"}`)
	f.Add(`{"iat":-9223372036854775808,"exp":9223372036854775807,"iss":"https://issuer.example"}`)
	keys := &rotation.ServiceAccountTokenKeys{MaxTokenExpiration: &metav1.Duration{Duration: time.Hour}, Issuer: "https://issuer.example"}
	f.Fuzz(func(t *testing.T, payload string) {
		got, err := CheckClaims(base64.RawURLEncoding.EncodeToString([]byte(payload)), keys, signNow)
		if err != nil {
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(payload), &obj); err != nil {
			t.Fatalf("accepted claims that are not a JSON object: %v", err)
		}
		iat, ierr := strconv.ParseInt(string(obj["iat"]), 10, 64)
		exp, eerr := strconv.ParseInt(string(obj["exp"]), 10, 64)
		if ierr != nil || eerr != nil {
			t.Fatalf("accepted non-integer iat %s or exp %s", obj["iat"], obj["exp"])
		}
		if exp <= iat || exp-iat > 3600 || iat < now-300 || iat > now+300 || exp > now+3600+60 {
			t.Fatalf("accepted iat %d exp %d at now %d", iat, exp, now)
		}
		var iss string
		if err := json.Unmarshal(obj["iss"], &iss); err != nil || iss != keys.Issuer {
			t.Fatalf("accepted iss %s", obj["iss"])
		}
		if got.IssuedAt.Unix() != iat || got.Expiry.Unix() != exp {
			t.Fatalf("read %+v from iat %d exp %d", got, iat, exp)
		}
	})
}
