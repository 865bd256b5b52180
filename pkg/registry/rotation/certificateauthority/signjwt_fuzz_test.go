package certificateauthority

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/jwtkey"
)

// FuzzCheckClaims: claims come from whoever may create signjwt; CheckClaims
// reads exp, iat and iss itself (beyond jwtkey.DecodeClaims), so it must
// never panic, and what it accepts must keep its rules when read again
// independently: integer exp and iat, 0 < exp-iat <= the max, iat near now,
// nbf not after exp, iss the issuer, and the same exp, iat and iss for a
// reader that ignores case. The seed corpus is in testdata/fuzz/FuzzCheckClaims.
func FuzzCheckClaims(f *testing.F) {
	now := signNow.Unix()
	f.Add(kubeClaims(now, now+3600))
	f.Add(`{"iat":1800000000,"exp":1800000000.0,"iss":"https://issuer.example"}`)
	f.Add(`{"iat":-9223372036854775808,"exp":9223372036854775807,"iss":"https://issuer.example"}`)
	f.Add(fmt.Sprintf(`{"iss":"https://issuer.example","iat":%d,"exp":%d,"EXP":%d}`, now, now+600, now+1e9))
	f.Add(fmt.Sprintf(`{"iss":"https://issuer.example","iat":%d,"exp":%d,"nbf":%d}`, now, now+600, now+601))
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
		skew, leeway := int64(jwtkey.ClockSkew/time.Second), int64(jwtkey.ExpiryLeeway/time.Second)
		if exp <= iat || exp-iat > 3600 || iat < now-skew || iat > now+skew || exp > now+3600+leeway {
			t.Fatalf("accepted iat %d exp %d at now %d", iat, exp, now)
		}
		var iss string
		if err := json.Unmarshal(obj["iss"], &iss); err != nil || iss != keys.Issuer {
			t.Fatalf("accepted iss %s", obj["iss"])
		}
		if raw, ok := obj["nbf"]; ok {
			nbf, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || nbf > exp {
				t.Fatalf("accepted nbf %s with exp %d", raw, exp)
			}
		}
		// Read as Go's encoding/json reads claims into a struct (case
		// folded, the last duplicate wins), exp, iat and iss are what was
		// checked: a federated verifier sees the same bounds.
		var folded struct {
			Exp json.RawMessage `json:"exp"`
			Iat json.RawMessage `json:"iat"`
			Iss json.RawMessage `json:"iss"`
		}
		if err := json.Unmarshal([]byte(payload), &folded); err != nil || !bytes.Equal(folded.Exp, obj["exp"]) || !bytes.Equal(folded.Iat, obj["iat"]) || !bytes.Equal(folded.Iss, obj["iss"]) {
			t.Fatalf("a case-insensitive reader reads exp %s iat %s iss %s, the check read %s %s %s (%v)", folded.Exp, folded.Iat, folded.Iss, obj["exp"], obj["iat"], obj["iss"], err)
		}
		if got.IssuedAt.Unix() != iat || got.Expiry.Unix() != exp {
			t.Fatalf("read %+v from iat %d exp %d", got, iat, exp)
		}
	})
}
