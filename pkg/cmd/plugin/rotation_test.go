package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	k8stesting "k8s.io/client-go/testing"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

var (
	t0     = time.Date(2026, 11, 22, 14, 30, 0, 0, time.UTC)
	fpOld  = "SHA256:" + strings.Repeat("4", 64)
	fpNew  = "SHA256:" + strings.Repeat("9", 64)
	fpGone = "SHA256:" + strings.Repeat("1", 64)
)

func caCert(fp string) *rotationv1alpha1.CACertificate {
	return &rotationv1alpha1.CACertificate{Fingerprint: fp, NotBefore: metav1.NewTime(t0), NotAfter: metav1.NewTime(t0.Add(87600 * time.Hour))}
}

func at(d time.Duration) *metav1.Time {
	t := metav1.NewTime(t0.Add(d))
	return &t
}

// preparingCA is a rotation waiting for one of two consumers.
func preparingCA() *rotationv1alpha1.CertificateAuthority {
	return &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "team-ca"},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{KeyAlgorithm: rotationv1alpha1.ECDSAP256, KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd},
			Rotation: &rotationv1alpha1.RotationPolicy{TrustPropagation: &metav1.Duration{Duration: 2 * time.Minute}}},
		Status: rotationv1alpha1.CertificateAuthorityStatus{
			Phase: rotationv1alpha1.PhasePreparing, LastInitiationTime: at(0),
			Current: caCert(fpOld), Next: caCert(fpNew),
			Trust: &rotationv1alpha1.TrustStatus{PublishedTime: at(time.Second), Consumers: 2, Waiting: 1, WaitingFor: []string{"kube-apiserver"}},
			Conditions: []metav1.Condition{{Type: rotationv1alpha1.CertificateAuthorityTrustPropagated, Status: metav1.ConditionFalse,
				Reason: rotationv1alpha1.ReasonWaitingForConsumers, Message: "the current CA signs; waiting for 1 of 2 trust consumers to hold the new CA: kube-apiserver"}},
		},
	}
}

func consumer(name, reporter string, holds ...rotationv1alpha1.TrustHeld) *rotationv1alpha1.TrustConsumer {
	return &rotationv1alpha1.TrustConsumer{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:   rotationv1alpha1.TrustConsumerSpec{CertificateAuthorities: []string{"team-ca"}, Reporter: reporter},
		Status: rotationv1alpha1.TrustConsumerStatus{Holds: holds}}
}

func held(ca string, report *metav1.Time, fps ...string) rotationv1alpha1.TrustHeld {
	return rotationv1alpha1.TrustHeld{CertificateAuthority: ca, Fingerprints: fps, ReportTime: report}
}

// TestPrintStatusWhilePreparing: the next CA, the trust section and the
// consumers, waited-for first, beside the format status always had.
func TestPrintStatusWhilePreparing(t *testing.T) {
	var out bytes.Buffer
	printStatus(&out, preparingCA(), consumersResult{items: []*rotationv1alpha1.TrustConsumer{
		consumer("a-kubelet", "system:node:n1", held("team-ca", at(time.Minute), fpOld, fpNew)),
		consumer("kube-apiserver", "system:serviceaccount:kube-system:trust-sync", held("team-ca", at(-time.Hour), fpOld)),
	}})
	got := out.String()
	for _, want := range []string{
		"Phase:", "Preparing", "Started:", "2026-11-22T14:30:00Z",
		"Current CA:", fpOld, "Next CA:", fpNew, "Signs:", "the current CA",
		"Trust:", "False (WaitingForConsumers): the current CA signs; waiting for 1 of 2",
		"Published:", "2026-11-22T14:30:01Z (trustPropagation 2m0s: ends 2026-11-22T14:32:01Z)",
		"Consumers:", "2 naming this CA, 1 not holding the new CA", "Waiting for:", "Not renewed:",
		"Trust consumers (2, 1 not holding the new CA; those first):",
		"NAME", "HOLDS NEW CA", "REPORTED", "REPORTER",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Prepared:") || strings.Contains(got, "Previous CA:") {
		t.Errorf("a Preparing CA has no Prepared time nor previous CA:\n%s", got)
	}
	// The waited-for consumer comes first although it sorts after.
	rows := tableRows(t, got, "NAME")
	if len(rows) != 2 || rows[0][0] != "kube-apiserver" || rows[0][1] != "no" || rows[0][2] != "2026-11-22T13:30:00Z" || rows[0][3] != "system:serviceaccount:kube-system:trust-sync" ||
		rows[1][0] != "a-kubelet" || rows[1][1] != "yes" {
		t.Errorf("consumer rows %q\n%s", rows, got)
	}
}

// tableRows returns the whitespace-separated rows after the header line
// starting with header, up to the next blank line.
func tableRows(t *testing.T, out, header string) [][]string {
	t.Helper()
	var rows [][]string
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, header+" "):
			in = true
		case in && strings.TrimSpace(line) == "":
			return rows
		case in:
			rows = append(rows, strings.Fields(line))
		}
	}
	return rows
}

func TestPrintStatusTrustStates(t *testing.T) {
	overridden := preparingCA()
	overridden.Status.Trust.OverriddenTime = at(time.Hour)
	unpublished := preparingCA()
	unpublished.Status.Trust = &rotationv1alpha1.TrustStatus{Unpublished: []string{"rekey-publisher (ConfigMaps, ClusterTrustBundles): not written yet"}}
	prepared := preparingCA()
	prepared.Status.Phase, prepared.Status.LastInitiationFinishedTime = rotationv1alpha1.PhasePrepared, at(3*time.Minute)
	prepared.Status.Current, prepared.Status.Previous, prepared.Status.Next = caCert(fpNew), caCert(fpOld), nil
	prepared.Status.Trust.Waiting, prepared.Status.Trust.WaitingFor = 0, nil
	prepared.Status.PendingRenewal = 1
	prepared.Status.PendingRenewals = []rotationv1alpha1.PendingRenewal{{Requester: "bob", Subject: "CN=b", CSRName: "before-b", NotAfter: metav1.NewTime(t0.Add(time.Hour))}}
	never := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "team-ca"}, Status: rotationv1alpha1.CertificateAuthorityStatus{Current: caCert(fpOld)}}
	for name, tc := range map[string]struct {
		ca        *rotationv1alpha1.CertificateAuthority
		consumers consumersResult
		want      []string
		not       []string
	}{
		"overridden": {ca: overridden, want: []string{"Overridden:", "2026-11-22T15:30:00Z (Prepare with force"}},
		"prepared by override: the frozen wait is not shown as current": {ca: func() *rotationv1alpha1.CertificateAuthority {
			ca := overridden.DeepCopy()
			ca.Status.Phase, ca.Status.Current, ca.Status.Previous, ca.Status.Next = rotationv1alpha1.PhasePrepared, caCert(fpNew), caCert(fpOld), nil
			return ca
		}(), want: []string{"Overridden:", "2 naming this CA, 1 not holding the new CA when it became Prepared"}, not: []string{"Waiting for:"}},
		"unpublished": {ca: unpublished, want: []string{"Published:", "not yet in every bundle rekey writes", "Unpublished:", "rekey-publisher (ConfigMaps, ClusterTrustBundles): not written yet"},
			not: []string{"Waiting for:"}},
		"prepared": {ca: prepared, consumers: consumersResult{items: []*rotationv1alpha1.TrustConsumer{consumer("kube-apiserver", "r", held("team-ca", at(0), fpOld, fpNew))}},
			want: []string{"Prepared:", "Previous CA:", "Current CA:   " + fpNew, "Published:  2026-11-22T14:30:01Z\n", "Not renewed:", "before-b", "kube-apiserver  yes"},
			not:  []string{"Next CA:", "Signs:", "trustPropagation", "Waiting for:"}},
		"never rotated, consumers hold it": {ca: never, consumers: consumersResult{items: []*rotationv1alpha1.TrustConsumer{consumer("c", "", held("team-ca", nil, fpGone))}}},
		"consumers not listable": {ca: preparingCA(), consumers: consumersResult{err: errors.New("cannot list TrustConsumers: forbidden")},
			want: []string{"Trust consumers: cannot list TrustConsumers: forbidden"}, not: []string{"REPORTER"}},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			printStatus(&out, tc.ca, tc.consumers)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
		})
	}
	var out bytes.Buffer
	printStatus(&out, never, consumersResult{items: []*rotationv1alpha1.TrustConsumer{consumer("c", "", held("team-ca", nil, fpGone))}})
	if rows := tableRows(t, out.String(), "NAME"); !strings.Contains(out.String(), "HOLDS CA ") || len(rows) != 1 || rows[0][1] != "no" || rows[0][2] != "<never>" || rows[0][3] != "<none>" {
		t.Errorf("never rotated:\n%s", out.String())
	}
	if strings.Contains(out.String(), "Trust:") || strings.Contains(out.String(), "Consumers:") {
		t.Errorf("a CA never rotated has no trust section:\n%s", out.String())
	}
}

// TestConsumerTableIsCapped: thousands of consumers (one per node) show
// the first 50, waited-for first, and how many more.
func TestConsumerTableIsCapped(t *testing.T) {
	var items []*rotationv1alpha1.TrustConsumer
	for i := range 120 {
		h := held("team-ca", at(0), fpOld, fpNew)
		if i%40 == 39 {
			h = held("team-ca", at(0), fpOld)
		}
		items = append(items, consumer(fmt.Sprintf("node-%03d", i), "system:node:x", h))
	}
	var out bytes.Buffer
	printStatus(&out, preparingCA(), consumersResult{items: items})
	rows := tableRows(t, out.String(), "NAME")
	if len(rows) != maxConsumersShown+1 {
		t.Fatalf("%d rows, want %d and the \"more\" line:\n%s", len(rows), maxConsumersShown, out.String())
	}
	for i, want := range []string{"node-039", "node-079", "node-119", "node-000"} {
		if rows[i][0] != want {
			t.Errorf("row %d is %s, want %s", i, rows[i][0], want)
		}
	}
	if !strings.Contains(out.String(), "... and 70 more (kubectl rekey consumers team-ca lists them all)") || !strings.Contains(out.String(), "(120, 3 not holding") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestStatusListsConsumersInPages: TrustConsumers have no field selector
// for CAs, so status lists them all a page at a time and keeps those
// naming the CA.
func TestStatusListsConsumersInPages(t *testing.T) {
	client := fake.NewSimpleClientset(preparingCA())
	var pages []metav1.ListOptions
	client.PrependReactor("list", "trustconsumers", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).ListOptions
		pages = append(pages, opts)
		other := consumer("other-ca-only", "r", held("other", at(0), fpNew))
		other.Spec.CertificateAuthorities = []string{"other"}
		if opts.Continue == "" {
			return true, &rotationv1alpha1.TrustConsumerList{ListMeta: metav1.ListMeta{Continue: "page2"},
				Items: []rotationv1alpha1.TrustConsumer{*consumer("z-holds", "r", held("team-ca", at(0), fpNew)), *other}}, nil
		}
		return true, &rotationv1alpha1.TrustConsumerList{Items: []rotationv1alpha1.TrustConsumer{*consumer("b-waits", "r")}}, nil
	})
	out, _, err := run(t, client, newStatusCommandForTest, "team-ca")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) != 2 || pages[0].Limit != consumerPageSize || pages[1].Continue != "page2" {
		t.Fatalf("list requests %+v, want two pages of %d", pages, consumerPageSize)
	}
	rows := tableRows(t, out, "NAME")
	if len(rows) != 2 || rows[0][0] != "b-waits" || rows[0][1] != "no" || rows[0][2] != "<never>" || rows[1][0] != "z-holds" {
		t.Fatalf("rows %q:\n%s", rows, out)
	}
}

// TestStatusWithoutListRightStillShowsTheCA: a user who may read the CA
// but not list TrustConsumers sees everything else.
func TestStatusWithoutListRightStillShowsTheCA(t *testing.T) {
	client := fake.NewSimpleClientset(preparingCA())
	client.PrependReactor("list", "trustconsumers", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "rotation.rekey.io", Resource: "trustconsumers"}, "", errors.New("RBAC: no"))
	})
	out, _, err := run(t, client, newStatusCommandForTest, "rca/team-ca")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Next CA:") || !strings.Contains(out, "Trust consumers: cannot list TrustConsumers:") || !strings.Contains(out, "forbidden") {
		t.Fatalf("output:\n%s", out)
	}
}

func newStatusCommandForTest(newClient func() (clientset.Interface, error), streams genericiooptions.IOStreams) *cobra.Command {
	return newStatusCommand(newClient, nil, nil, streams)
}

func newRotateCommandForTest(newClient func() (clientset.Interface, error), streams genericiooptions.IOStreams) *cobra.Command {
	return newRotateCommand(newClient, func() (string, error) { return "default", nil }, streams)
}

// run executes a command against the fake client.
func run(t *testing.T, client *fake.Clientset, newCmd func(func() (clientset.Interface, error), genericiooptions.IOStreams) *cobra.Command, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newCmd(func() (clientset.Interface, error) { return client, nil }, genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// TestRotatePrepare: prepare posts Prepare with force, and without
// --force says what force does before anything is sent.
func TestRotatePrepare(t *testing.T) {
	for name, tc := range map[string]struct {
		args      []string
		wantErr   string
		wantOut   string
		wantPosts int
	}{
		"force":                 {args: []string{"prepare", "--force", "team-ca"}, wantOut: "certificateauthority.rotation.rekey.io/team-ca rotation wait for trust overridden (phase Preparing)", wantPosts: 1},
		"force, rca/NAME":       {args: []string{"prepare", "--force", "rca/team-ca"}, wantOut: "team-ca rotation wait for trust overridden", wantPosts: 1},
		"without force":         {args: []string{"prepare", "team-ca"}, wantErr: "prepare needs --force: \"team-ca\" becomes Prepared by itself once every trust consumer holds the new CA (kubectl rekey status team-ca names those it waits for); --force ends the wait now"},
		"not for a credential":  {args: []string{"prepare", "--force", "rcred/db"}, wantErr: "prepare applies to CertificateAuthorities only"},
		"start takes no force":  {args: []string{"start", "--force", "team-ca"}, wantErr: "unknown flag: --force"},
		"start posts no force":  {args: []string{"start", "team-ca"}, wantOut: "rotation started", wantPosts: 1},
		"complete still forces": {args: []string{"complete", "--force", "team-ca"}, wantOut: "rotation completing", wantPosts: 1},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset()
			var posted []*rotationv1alpha1.Rotation
			client.PrependReactor("create", "certificateauthorities", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "rotate" {
					return false, nil, nil
				}
				r := a.(k8stesting.CreateAction).GetObject().(*rotationv1alpha1.Rotation)
				posted = append(posted, r)
				phase := rotationv1alpha1.PhasePreparing
				if r.Action == rotationv1alpha1.RotationComplete {
					phase = rotationv1alpha1.PhaseCompleting
				}
				return true, &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "team-ca"}, Status: rotationv1alpha1.CertificateAuthorityStatus{Phase: phase}}, nil
			})
			out, _, err := run(t, client, newRotateCommandForTest, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
			} else if err != nil || !strings.Contains(out, tc.wantOut) {
				t.Fatalf("error %v, output %q, want %q", err, out, tc.wantOut)
			}
			if len(posted) != tc.wantPosts || len(client.Actions()) != tc.wantPosts {
				t.Fatalf("posted %d Rotations (%d requests), want %d", len(posted), len(client.Actions()), tc.wantPosts)
			}
			if len(posted) == 1 {
				action := rotationv1alpha1.RotationAction(strings.ToUpper(tc.args[0][:1]) + tc.args[0][1:])
				wantForce := strings.Contains(strings.Join(tc.args, " "), "--force")
				if posted[0].Action != action || posted[0].Force != wantForce {
					t.Fatalf("posted %+v, want action %s force %v", posted[0], action, wantForce)
				}
			}
		})
	}
}
