package signerhostcluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"rekey.io/rekey/pkg/admission/admissiontest"
	"rekey.io/rekey/pkg/apis/certificates"
)

const host = "certificates.k8s.io"

func signer(name string, mode certificates.ApprovalMode, hc *certificates.HostClusterServing) *certificates.Signer {
	return &certificates.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: strings.Replace(name, "/", ":", 1), Labels: map[string]string{}},
		Spec: certificates.SignerSpec{SignerName: name, CertificateAuthorityRef: certificates.CertificateAuthorityReference{Name: "ca"},
			Policy:      certificates.SignerPolicy{MaxDuration: metav1.Duration{Duration: 24 * time.Hour}},
			Approval:    certificates.SignerApproval{Mode: mode},
			HostCluster: hc},
	}
}

func csrs() *certificates.HostClusterServing {
	return &certificates.HostClusterServing{CertificateSigningRequests: true}
}

func pcrs() *certificates.HostClusterServing {
	return &certificates.HostClusterServing{PodCertificateRequests: &certificates.PodCertificatePolicy{
		Allowed: []certificates.PodCertificateSubjects{{Namespace: "team"}}}}
}

func attrs(s, old *certificates.Signer, op admission.Operation, subresource, userName string) admission.Attributes {
	return admission.NewAttributesRecord(s, old, certificates.Kind("Signer").WithVersion("v1alpha1"),
		"", s.Name, certificates.Resource("signers").WithVersion("v1alpha1"), subresource,
		op, nil, false, &user.DefaultInfo{Name: userName})
}

// TestHostClusterNeedsTheHostsPermissions: a user who may write Signers in
// rekey (that plugin is SignerBinding's) still needs, in the host cluster,
// what spec.hostCluster makes rekey do there.
func TestHostClusterNeedsTheHostsPermissions(t *testing.T) {
	grants := []admissiontest.Grant{
		// rekey's own signers resource: SignerBinding's business, never
		// enough here.
		{User: "rekey-only", Verb: "sign", Name: "kubernetes.io/kube-apiserver-client-kubelet"},
		{User: "rekey-only", Verb: "approve", Name: "kubernetes.io/kube-apiserver-client-kubelet"},
		{User: "signer", Verb: "sign", Name: "kubernetes.io/kube-apiserver-client-kubelet", Group: host},
		{User: "approver", Verb: "sign", Name: "kubernetes.io/kube-apiserver-client-kubelet", Group: host},
		{User: "approver", Verb: "approve", Name: "kubernetes.io/kube-apiserver-client-kubelet", Group: host},
		{User: "approver", Verb: "sign", Name: "kubernetes.io/kubelet-serving", Group: host},
		{User: "team", Verb: "sign", Name: "team.example.com/*", Group: host},
		{User: "exact", Verb: "sign", Name: "team.example.com/app", Group: host},
	}
	const kubelet, serving = "kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"
	tests := map[string]struct {
		user    string
		signer  *certificates.Signer
		wantErr []string // empty: allowed
	}{
		"no hostCluster needs nothing": {user: "nobody", signer: signer(kubelet, certificates.ApprovalNodeClient, nil)},
		"rekey's signers resource is not the host's": {user: "rekey-only", signer: signer(kubelet, certificates.ApprovalManual, csrs()),
			wantErr: []string{"spec.hostCluster makes rekey sign", `user "rekey-only"`, `verb "sign"`, `group "certificates.k8s.io"`, `resourceName "kubernetes.io/kube-apiserver-client-kubelet" or "kubernetes.io/*"`}},
		"Manual needs sign only":                {user: "signer", signer: signer(kubelet, certificates.ApprovalManual, csrs())},
		"NodeClient needs approve too":          {user: "signer", signer: signer(kubelet, certificates.ApprovalNodeClient, csrs()), wantErr: []string{"spec.hostCluster.certificateSigningRequests", "spec.approval.mode NodeClient", `verb "approve"`, `group "certificates.k8s.io"`}},
		"NodeClient with sign and approve":      {user: "approver", signer: signer(kubelet, certificates.ApprovalNodeClient, csrs())},
		"NodeServing needs approve on its name": {user: "approver", signer: signer(serving, certificates.ApprovalNodeServing, csrs()), wantErr: []string{"spec.approval.mode NodeServing", `verb "approve"`, `"kubernetes.io/kubelet-serving"`}},
		"pod certificates need sign":            {user: "nobody", signer: signer("team.example.com/app", certificates.ApprovalManual, pcrs()), wantErr: []string{"spec.hostCluster makes rekey sign", `verb "sign"`}},
		"pod certificates need no approve":      {user: "team", signer: signer("team.example.com/app", certificates.ApprovalNodeClient, pcrs())},
		"the domain wildcard grants":            {user: "team", signer: signer("team.example.com/app", certificates.ApprovalManual, csrs())},
		"the exact name grants":                 {user: "exact", signer: signer("team.example.com/app", certificates.ApprovalManual, csrs())},
		"an exact name is not its domain":       {user: "exact", signer: signer("team.example.com/other", certificates.ApprovalManual, csrs()), wantErr: []string{`verb "sign"`}},
		"another domain":                        {user: "team", signer: signer("other.example.com/app", certificates.ApprovalManual, csrs()), wantErr: []string{`verb "sign"`}},
		"an empty hostCluster still lends sign": {user: "nobody", signer: signer("team.example.com/app", certificates.ApprovalManual, &certificates.HostClusterServing{}), wantErr: []string{`verb "sign"`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := &admissiontest.Authorizer{T: t, Grants: grants}
			p := New()
			p.SetAuthorizer(fake.Authorizer())
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			err := p.Validate(context.Background(), attrs(tc.signer, nil, admission.Create, "", tc.user), nil)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) {
				t.Fatalf("error = %v, want Forbidden", err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
		})
	}
}

// TestUpdates: adding or changing spec.hostCluster, or any other spec
// field while it is set, is checked; metadata-only updates and removing it
// are not.
func TestUpdates(t *testing.T) {
	const name = "team.example.com/app"
	plain := signer(name, certificates.ApprovalManual, nil)
	withCSRs := signer(name, certificates.ApprovalManual, csrs())
	labelled := withCSRs.DeepCopy()
	labelled.Labels["team"] = "a"
	toNodeClient := withCSRs.DeepCopy()
	toNodeClient.Spec.Approval.Mode = certificates.ApprovalNodeClient
	widened := withCSRs.DeepCopy()
	widened.Spec.Policy.Subject.CommonNamePrefix = "system:node:"
	addPCRs := withCSRs.DeepCopy()
	addPCRs.Spec.HostCluster.PodCertificateRequests = pcrs().PodCertificateRequests

	tests := map[string]struct {
		old, new *certificates.Signer
		user     string
		wantErr  string
	}{
		"adding hostCluster":                          {old: plain, new: withCSRs, user: "nobody", wantErr: `verb "sign"`},
		"adding hostCluster, allowed":                 {old: plain, new: withCSRs, user: "team"},
		"changing hostCluster":                        {old: withCSRs, new: addPCRs, user: "nobody", wantErr: "spec.hostCluster makes rekey sign"},
		"labels only":                                 {old: withCSRs, new: labelled, user: "nobody"},
		"removing hostCluster":                        {old: withCSRs, new: plain, user: "nobody"},
		"the policy while it is set":                  {old: withCSRs, new: widened, user: "nobody", wantErr: `verb "sign"`},
		"approval to NodeClient while it is set":      {old: withCSRs, new: toNodeClient, user: "team", wantErr: `verb "approve"`},
		"the status subresource is not this plugin's": {old: plain, new: withCSRs, user: "nobody"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := &admissiontest.Authorizer{T: t, Grants: []admissiontest.Grant{{User: "team", Verb: "sign", Name: "team.example.com/*", Group: host}}}
			p := New()
			p.SetAuthorizer(fake.Authorizer())
			subresource := ""
			if strings.Contains(name, "status") {
				subresource = "status"
			}
			err := p.Validate(context.Background(), attrs(tc.new, tc.old, admission.Update, subresource, tc.user), nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(fake.Calls) != 0 && tc.user == "nobody" {
					t.Fatalf("asked the authorizer %d times for an update that needs nothing", len(fake.Calls))
				}
				return
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want Forbidden containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestAuthorizerErrorDenies: a failing host authorizer refuses, never lets
// the Signer through.
func TestAuthorizerErrorDenies(t *testing.T) {
	fake := &admissiontest.Authorizer{T: t, Err: errors.New("webhook down")}
	p := New()
	p.SetAuthorizer(fake.Authorizer())
	err := p.Validate(context.Background(), attrs(signer("team.example.com/app", certificates.ApprovalManual, csrs()), nil, admission.Create, "", "team"), nil)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("error = %v, want Forbidden", err)
	}
}

func TestRequiresAuthorizer(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil {
		t.Fatal("initialized without an authorizer")
	}
}
