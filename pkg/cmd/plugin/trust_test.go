package plugin

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

func newConsumersCommandForTest(newClient func() (clientset.Interface, error), streams genericiooptions.IOStreams) *cobra.Command {
	return newConsumersCommand(newClient, streams)
}

// TestConsumersCommand: one row per consumer and CA, what it holds named
// by the CA's status, filtered by CA when one is given.
func TestConsumersCommand(t *testing.T) {
	other := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Status: rotationv1alpha1.CertificateAuthorityStatus{Phase: rotationv1alpha1.PhasePrepared, Current: caCert(fpNew), Previous: caCert(fpOld)}}
	both := consumer("kube-apiserver", "system:serviceaccount:kube-system:trust-sync",
		held("team-ca", at(time.Minute), fpOld, fpNew), held("other", at(0), fpGone, fpOld, fpNew))
	both.Spec.CertificateAuthorities = []string{"other", "team-ca"}
	gone := consumer("gone-ca", "r")
	gone.Spec.CertificateAuthorities = []string{"deleted-ca"}
	client := fake.NewSimpleClientset(preparingCA(), other, both, consumer("kubelet-n1", "system:node:n1", held("team-ca", at(0), fpOld)), gone)

	out, _, err := run(t, client, newConsumersCommandForTest)
	if err != nil {
		t.Fatal(err)
	}
	rows := tableRows(t, out, "NAME")
	want := [][]string{
		{"gone-ca", "deleted-ca", "<nothing", "reported>", "<never>", "r"},
		{"kube-apiserver", "other", "previous,current,other(1)", "2026-11-22T14:30:00Z", "system:serviceaccount:kube-system:trust-sync"},
		{"kube-apiserver", "team-ca", "current,next", "2026-11-22T14:31:00Z", "system:serviceaccount:kube-system:trust-sync"},
		{"kubelet-n1", "team-ca", "current", "2026-11-22T14:30:00Z", "system:node:n1"},
	}
	if strings.Join(flatten(rows), " ") != strings.Join(flatten(want), " ") {
		t.Fatalf("rows\n%q\nwant\n%q\n%s", rows, want, out)
	}

	out, _, err = run(t, client, newConsumersCommandForTest, "rca/team-ca")
	if err != nil {
		t.Fatal(err)
	}
	if rows := tableRows(t, out, "NAME"); len(rows) != 2 || rows[0][1] != "team-ca" || rows[1][0] != "kubelet-n1" {
		t.Fatalf("filtered to team-ca:\n%s", out)
	}

	_, errOut, err := run(t, client, newConsumersCommandForTest, "no-such-ca")
	if err != nil || !strings.Contains(errOut, "No trust consumers found.") {
		t.Fatalf("error %v, errOut %q", err, errOut)
	}
}

func flatten(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, strings.Join(r, " "))
	}
	return out
}

func TestDescribeHeld(t *testing.T) {
	ca := preparingCA()
	for _, tc := range []struct {
		ca   *rotationv1alpha1.CertificateAuthority
		h    *rotationv1alpha1.TrustHeld
		want string
	}{
		{ca, nil, "<nothing reported>"},
		{ca, &rotationv1alpha1.TrustHeld{}, "<nothing reported>"},
		{ca, &rotationv1alpha1.TrustHeld{Fingerprints: []string{fpNew, fpOld}}, "current,next"},
		{ca, &rotationv1alpha1.TrustHeld{Fingerprints: []string{fpGone}}, "other(1)"},
		{nil, &rotationv1alpha1.TrustHeld{Fingerprints: []string{fpGone, fpOld}}, "2 certificate(s) (CA not readable)"},
	} {
		if got := describeHeld(tc.ca, tc.h); got != tc.want {
			t.Errorf("describeHeld(%v) = %q, want %q", tc.h, got, tc.want)
		}
	}
}
