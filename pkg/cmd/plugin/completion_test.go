package plugin

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	k8stesting "k8s.io/client-go/testing"

	attestationv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

// completionRoot is kubectl rekey's tree on a fake client, completed as
// NewCommand completes it, plus a "request --signer" standing in for a
// command that takes signer names.
func completionRoot(client clientset.Interface) *cobra.Command {
	newClient := func() (clientset.Interface, error) { return client, nil }
	namespace := func() (string, error) { return "team-a", nil }
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}
	root := &cobra.Command{Use: "kubectl-rekey", SilenceErrors: true, SilenceUsage: true}
	root.AddCommand(newDecisionCommand(decisionApprove, newClient, streams), newDecisionCommand(decisionDeny, newClient, streams),
		newRotateCommand(newClient, namespace, streams), newStatusCommand(newClient, nil, namespace, streams),
		newBundleCommand(newClient, streams), newConsumersCommand(newClient, streams), newAttestCommand(newClient, streams))
	request := &cobra.Command{Use: "request NAME", Run: func(*cobra.Command, []string) {}}
	request.Flags().String("signer", "", "")
	root.AddCommand(request)
	addCompletions(root, Completer{newClient: newClient, namespace: namespace})
	return root
}

// complete runs cobra's __complete as kubectl_complete-rekey does and
// returns the completions (without descriptions) and the directive line.
func complete(t *testing.T, root *cobra.Command, args ...string) ([]string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	root.SetArgs(append([]string{cobra.ShellCompNoDescRequestCmd}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	if err := root.Execute(); err != nil {
		t.Fatalf("__complete %v: %v", args, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func completionObjects() []runtime.Object {
	issued := withCertificate(request("alice-issued", certv1alpha1.CertificateApproved), []byte("x"))
	ca2 := readyCA()
	ca2.Name = "web-ca"
	return []runtime.Object{
		request("alice"), request("alice-2"), request("bob"), request("alice-denied", certv1alpha1.CertificateDenied), issued,
		readySigner(), readyCA(), ca2,
		&rotationv1alpha1.RotatingCredential{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: "team-a"}},
		&rotationv1alpha1.RotatingCredential{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "team-b"}},
		&attestationv1alpha1.NodeAttestation{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
	}
}

// TestCompletion: request, CA, RotatingCredential, Signer and node names
// come from the server.
func TestCompletion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		// approve and deny: pending requests first, not those already named.
		{[]string{"approve", ""}, []string{"alice", "alice-2", "bob"}},
		{[]string{"approve", "alice", "al"}, []string{"alice-2"}},
		{[]string{"deny", "b"}, []string{"bob"}},
		// None pending matches: every request that does.
		{[]string{"approve", "alice-d"}, []string{"alice-denied"}},
		{[]string{"rotate", "start", ""}, []string{"rcred/db-password", "team-ca", "web-ca"}},
		{[]string{"rotate", "start", "rc"}, []string{"rcred/db-password"}},
		{[]string{"rotate", "start", "team-ca", ""}, nil},
		{[]string{"rotate", "prepare", "--force", ""}, []string{"team-ca", "web-ca"}},
		{[]string{"rotate", "complete", "w"}, []string{"web-ca"}},
		{[]string{"status", "rcred/"}, []string{"rcred/db-password"}},
		{[]string{"bundle", "t"}, []string{"team-ca"}},
		{[]string{"consumers", "team-ca", ""}, []string{"web-ca"}},
		{[]string{"attest", "status", ""}, []string{"node-1"}},
		{[]string{"request", "x", "--signer", "example.com/"}, []string{"example.com/team-signer"}},
		{[]string{"approve", "-o", ""}, []string{"name"}},
		{[]string{"approve", "--dry-run="}, []string{"none", "server", "client"}},
	} {
		root := completionRoot(fake.NewSimpleClientset(completionObjects()...))
		got, directive := complete(t, root, tc.args...)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") || directive != ":4" {
			t.Errorf("%v: completions %q (directive %s), want %q (:4, no files)", tc.args, got, directive, tc.want)
		}
	}
}

// TestCompletionDescriptions: a request's state and signer, a CA's
// readiness, shown by shells that show descriptions.
func TestCompletionDescriptions(t *testing.T) {
	root := completionRoot(fake.NewSimpleClientset(completionObjects()...))
	var out bytes.Buffer
	root.SetArgs([]string{cobra.ShellCompRequestCmd, "approve", "b"})
	root.SetOut(&out)
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "bob\tPending example.com/team-signer\n") {
		t.Fatalf("error %v, output %q", err, out.String())
	}
	out.Reset()
	root.SetArgs([]string{cobra.ShellCompRequestCmd, "bundle", "team"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "team-ca\tReady=True\n") {
		t.Fatalf("error %v, output %q", err, out.String())
	}
}

// TestCompletionWithoutPermission: a refused list completes nothing, and
// CA completion still works for a user who may not list credentials.
func TestCompletionWithoutPermission(t *testing.T) {
	client := fake.NewSimpleClientset(completionObjects()...)
	for _, resource := range []string{"certificatesigningrequests", "rotatingcredentials"} {
		client.PrependReactor("list", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", errors.New("no"))
		})
	}
	root := completionRoot(client)
	if got, directive := complete(t, root, "approve", ""); len(got) != 0 || directive != ":4" {
		t.Errorf("approve: %q %s", got, directive)
	}
	if got, _ := complete(t, root, "rotate", "start", ""); strings.Join(got, ",") != "team-ca,web-ca" {
		t.Errorf("rotate start: %q", got)
	}
}
