package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/test/framework"
)

// TestNoCredentialInTheLogAtV10: rekey-apiserver runs at -v=10 (client-go
// then dumps request and response bodies, headers and curl commands) and
// mints a Random value, a ServiceAccount token, a webhook's password and a
// ClientCertificate's key. None of them appears anywhere in its log: not
// as itself, not base64-encoded (JSON bodies), not inside a hex dump
// (protobuf bodies), not a line of the key's PEM.
func TestNoCredentialInTheLogAtV10(t *testing.T) {
	if err := cluster.RestartRekey("--v=10"); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := cluster.RestartRekey(); err != nil {
				t.Errorf("restarting rekey at its usual verbosity: %v", err)
			}
		}
	})
	hook := newWebhookServer(t)
	nsRandom, nsToken, nsHook, nsCert := credentialNamespace(t, "rcred-log-random"), credentialNamespace(t, "rcred-log-sa"),
		credentialNamespace(t, "rcred-log-hook"), credentialNamespace(t, "rcred-log-cert")
	if _, err := cluster.Admin.CoreV1().ServiceAccounts(nsToken).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newCredential(t, nsRandom, time.Hour, time.Minute, rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterRandom,
		Random: &rotationv1alpha1.RandomMinter{Key: "password", Length: 32}})
	newCredential(t, nsToken, time.Hour, time.Minute, rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterServiceAccountToken,
		ServiceAccountToken: &rotationv1alpha1.ServiceAccountTokenMinter{ServiceAccountName: "app"}})
	newCredential(t, nsHook, time.Hour, time.Minute, hook.minter(5))
	newCredential(t, nsCert, time.Hour, time.Minute, rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterClientCertificate,
		ClientCertificate: &rotationv1alpha1.ClientCertificateMinter{SignerName: "rekey.io/kube-apiserver-client", CommonName: "rcred-log", Organizations: []string{"rcred-e2e"}}})

	minted := map[string][]byte{}
	for ns, key := range map[string]string{nsRandom: "password", nsToken: "token", nsHook: "password", nsCert: "tls.key"} {
		s := waitSecret(t, ns, "minted", 60*time.Second, func(s *corev1.Secret) bool { return generation(s) == 1 && len(s.Data[key]) > 0 })
		minted[ns+" "+key] = s.Data[key]
	}
	// The log is flushed every few seconds: wait until it shows rekey's
	// serving of each credential's status write, which follows its Secret's.
	framework.Eventually(t, settleTimeout, "the log showing every credential's status write", func(ctx context.Context) error {
		log := cluster.Rekey.Log()
		for _, ns := range []string{nsRandom, nsToken, nsHook, nsCert} {
			if !strings.Contains(log, "/namespaces/"+ns+"/rotatingcredentials/cred/status") {
				return fmt.Errorf("the log does not show %s's status write yet", ns)
			}
		}
		return nil
	})
	cluster.Rekey.Stop(30 * time.Second)
	log := cluster.Rekey.Log()
	restarted = true
	if err := cluster.RestartRekey(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "Request Body") && !strings.Contains(log, "round_trippers.go") {
		// Proof that the run was verbose enough to dump bodies somewhere
		// (kube-apiserver's discovery and other calls not quieted).
		t.Logf("note: no client body dump at all in the log (%d bytes)", len(log))
	}
	searchable := log + "\n" + string(hexDumps(log))
	for what, value := range minted {
		for _, needle := range needles(value) {
			if strings.Contains(searchable, needle) {
				t.Errorf("%s appears in rekey-apiserver's log at -v=10 (as %.12q...)", what, needle)
			}
		}
	}
}

// needles are the forms a credential takes in a log: itself, base64 (JSON
// bodies carry Secret data so), and for a PEM key each line of its body.
func needles(value []byte) []string {
	out := []string{string(value), base64.StdEncoding.EncodeToString(value)}
	if strings.HasPrefix(string(value), "-----BEGIN") {
		for _, line := range strings.Split(string(value), "\n") {
			if len(line) >= 32 && !strings.HasPrefix(line, "-----") {
				out = append(out, line)
			}
		}
	}
	return out
}

var hexDumpRow = regexp.MustCompile(`^\s*[0-9a-f]{8}  ((?:[0-9a-f]{2} {1,2}){1,16})`)

// hexDumps decodes the hex dumps in log (client-go dumps a binary body,
// protobuf, with hex.Dump): each dump's bytes, one after the other.
func hexDumps(log string) []byte {
	var out []byte
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		m := hexDumpRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		b, err := hex.DecodeString(strings.ReplaceAll(m[1], " ", ""))
		if err == nil {
			out = append(out, b...)
		}
	}
	return out
}
