package trustconsumer

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/admission/admissiontest"
	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/jwtsigner"
)

func consumer(reporter string, cas ...string) *rotation.TrustConsumer {
	return &rotation.TrustConsumer{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver"},
		Spec: rotation.TrustConsumerSpec{CertificateAuthorities: cas, Reporter: reporter}}
}

func attrs(obj, old *rotation.TrustConsumer, subresource, userName string) admission.Attributes {
	op := admission.Create
	var oldObj runtime.Object
	if old != nil {
		op, oldObj = admission.Update, old
	}
	return admission.NewAttributesRecord(obj, oldObj, rotation.Kind("TrustConsumer").WithVersion("v1alpha1"), "", obj.Name,
		rotation.Resource("trustconsumers").WithVersion("v1alpha1"), subresource, op, nil, false,
		&user.DefaultInfo{Name: userName, Groups: []string{user.AllAuthenticated}})
}

// cas is a CertificateAuthority getter holding "sa" (purpose
// ServiceAccountTokens) and "a", "b", "c" (Certificates).
type cas map[string]*rotation.CertificateAuthority

func (c cas) Get(_ context.Context, name string) (*rotation.CertificateAuthority, error) {
	if ca, ok := c[name]; ok {
		return ca, nil
	}
	return nil, apierrors.NewNotFound(rotation.Resource("certificateauthorities"), name)
}

func testCAs() cas {
	c := cas{}
	for name, purpose := range map[string]rotation.CAPurpose{"sa": rotation.PurposeServiceAccountTokens, "a": rotation.PurposeCertificates, "b": rotation.PurposeCertificates, "c": ""} {
		c[name] = &rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: rotation.CertificateAuthoritySpec{Purpose: purpose}}
	}
	return c
}

func newPlugin(t *testing.T, fake *admissiontest.Authorizer) *Plugin {
	t.Helper()
	p := New()
	p.SetAuthorizer(fake.Authorizer())
	p.SetCertificateAuthorities(testCAs())
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRequiresAnAuthorizer(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil {
		t.Fatal("started without an authorizer")
	}
	p := New()
	p.SetAuthorizer(authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "", nil
	}))
	if err := p.ValidateInitialization(); err == nil {
		t.Fatal("started without a CertificateAuthority getter")
	}
}

// TestJWTSignerConsumerNamesAreReserved: kube-apiserver-jwt.<host> is the
// consumer through which a host's rekey-agent jwt-signer holds a
// service-account key's rotation until its kube-apiserver fetched the new
// key. Whoever squats the name (registering it first, naming another CA)
// takes that gate away; whoever registers one naming a Certificates CA
// holds that CA's rotations under a signer's name. So only a user who may
// sign with every CA it names (create certificateauthorities/signjwt) may
// register one or add a CA to it, it must name at least one CA, and every
// CA it names must have purpose ServiceAccountTokens.
func TestJWTSignerConsumerNamesAreReserved(t *testing.T) {
	if jwtsigner.ConsumerPrefix != JWTSignerConsumerPrefix {
		t.Fatalf("jwt-signer registers %s<host>, the plugin reserves %s", jwtsigner.ConsumerPrefix, JWTSignerConsumerPrefix)
	}
	signjwt := func(u, ca string) admissiontest.Grant {
		return admissiontest.Grant{User: u, Verb: "create", Name: ca, Resource: "certificateauthorities", Subresource: "signjwt"}
	}
	trust := func(u, ca string) admissiontest.Grant {
		return admissiontest.Grant{User: u, Verb: "trust", Name: ca, Resource: "certificateauthorities"}
	}
	grants := []admissiontest.Grant{
		trust("signer", "sa"), signjwt("signer", "sa"), trust("signer", "a"), trust("signer", "gone"), signjwt("signer", "gone"),
		trust("reporter", "sa"),
		trust("both", "a"), signjwt("both", "a"), trust("both", "c"), signjwt("both", "c"),
	}
	named := func(name, reporter string, cas ...string) *rotation.TrustConsumer {
		tc := consumer(reporter, cas...)
		tc.Name = name
		return tc
	}
	const host = "kube-apiserver-jwt.cp-1"
	tests := map[string]struct {
		obj, old *rotation.TrustConsumer
		sub      string
		user     string
		wantErr  []string
	}{
		"the signer registers":         {obj: named(host, "", "sa"), user: "signer"},
		"a reporter without signjwt":   {obj: named(host, "", "sa"), user: "reporter", wantErr: []string{`"reporter"`, host, `CertificateAuthority "sa"`, `verb "create"`, `"certificateauthorities/signjwt"`, `resourceName "sa"`, JWTSignerConsumerPrefix}},
		"one CA without signjwt":       {obj: named(host, "", "sa", "a"), user: "signer", wantErr: []string{`CertificateAuthority "a"`, `"certificateauthorities/signjwt"`}},
		"a Certificates CA":            {obj: named(host, "", "a"), user: "both", wantErr: []string{`CertificateAuthority "a"`, "spec.purpose", "Certificates", "ServiceAccountTokens"}},
		"a CA of no purpose":           {obj: named(host, "", "c"), user: "both", wantErr: []string{`CertificateAuthority "c"`, "ServiceAccountTokens"}},
		"no CA at all":                 {obj: named(host, ""), user: "signer", wantErr: []string{host, "at least one"}},
		"a CA that does not exist":     {obj: named(host, "", "gone"), user: "signer", wantErr: []string{`CertificateAuthority "gone"`, "not found"}},
		"the signer adds a CA":         {obj: named(host, "signer", "sa", "a"), old: named(host, "signer", "sa"), user: "signer", wantErr: []string{`CertificateAuthority "a"`}},
		"the signer keeps its CA":      {obj: named(host, "signer", "sa"), old: named(host, "signer", "sa"), user: "signer"},
		"the signer reports":           {obj: named(host, "signer", "sa"), old: named(host, "signer", "sa"), sub: "status", user: "signer"},
		"an ordinary name is not held": {obj: named("kube-apiserver", "", "sa"), user: "reporter"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := &admissiontest.Authorizer{T: t, Grants: grants}
			err := newPlugin(t, fake).Validate(context.Background(), attrs(tc.obj, tc.old, tc.sub, tc.user), nil)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) {
				t.Fatalf("want 403, got %v", err)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %s", err, s)
				}
			}
		})
	}
}

func TestRegisteringNeedsTrustOnEveryCA(t *testing.T) {
	grants := []admissiontest.Grant{
		{User: "syncer", Verb: "trust", Name: "a", Resource: "certificateauthorities"},
		{User: "syncer", Verb: "use", Name: "b", Resource: "certificateauthorities"}, // not trust
	}
	tests := map[string]struct {
		obj, old *rotation.TrustConsumer
		user     string
		wantErr  []string
	}{
		"create, trusted CA": {obj: consumer("", "a"), user: "syncer"},
		"create, one untrusted": {obj: consumer("", "a", "b"), user: "syncer",
			wantErr: []string{`"syncer"`, `"kube-apiserver"`, `CertificateAuthority "b"`, `verb "trust"`, `"certificateauthorities"`, `"rotation.rekey.io"`, `resourceName "b"`}},
		"create, other user":    {obj: consumer("", "a"), user: "mallory", wantErr: []string{`CertificateAuthority "a"`}},
		"update keeps the CAs":  {obj: consumer("syncer", "a", "b"), old: consumer("syncer", "a", "b"), user: "syncer"},
		"update drops a CA":     {obj: consumer("syncer", "a"), old: consumer("syncer", "a", "b"), user: "syncer"},
		"update adds a CA":      {obj: consumer("syncer", "a", "b"), old: consumer("syncer", "a"), user: "syncer", wantErr: []string{`CertificateAuthority "b"`, `verb "trust"`}},
		"update adds a trusted": {obj: consumer("syncer", "b", "a"), old: consumer("syncer", "b"), user: "syncer"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := &admissiontest.Authorizer{T: t, Grants: grants}
			err := newPlugin(t, fake).Validate(context.Background(), attrs(tc.obj, tc.old, "", tc.user), nil)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) {
				t.Fatalf("want 403, got %v", err)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %s", err, s)
				}
			}
		})
	}
}

// Every write but delete is the reporter's: spec and status, whatever
// rights the writer has otherwise.
func TestOnlyTheReporterWrites(t *testing.T) {
	fake := &admissiontest.Authorizer{T: t, Grants: []admissiontest.Grant{
		{User: "other", Verb: "trust", Name: "a", Resource: "certificateauthorities"},
		{User: "syncer", Verb: "trust", Name: "a", Resource: "certificateauthorities"},
	}}
	p := newPlugin(t, fake)
	old := consumer("syncer", "a")
	report := old.DeepCopy()
	report.Status.Holds = []rotation.TrustHeld{{CertificateAuthority: "a"}}
	for _, sub := range []string{"", "status"} {
		if err := p.Validate(context.Background(), attrs(report, old, sub, "syncer"), nil); err != nil {
			t.Fatalf("the reporter was refused on %q: %v", sub, err)
		}
		err := p.Validate(context.Background(), attrs(report, old, sub, "other"), nil)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `only "syncer", which registered trust consumer "kube-apiserver", may report for it`) {
			t.Fatalf("another user on %q: want 403 naming the reporter, got %v", sub, err)
		}
	}
	if len(fake.Calls) != 0 {
		t.Fatalf("checked trust for CAs the consumer already named: %v", fake.Calls)
	}
	// A status write never needs trust, even from the reporter whose
	// trust was since taken away.
	if err := newPlugin(t, &admissiontest.Authorizer{T: t}).Validate(context.Background(), attrs(report, old, "status", "syncer"), nil); err != nil {
		t.Fatalf("a report needed trust: %v", err)
	}
}

// Taking the finalizers off a consumer being deleted is part of deleting
// it; anything else on the way is not.
func TestFinishingADeletion(t *testing.T) {
	p := newPlugin(t, &admissiontest.Authorizer{T: t})
	now := metav1.Now()
	old := consumer("gone", "a")
	old.DeletionTimestamp = &now
	old.Finalizers = []string{"example.com/keep", "example.com/other"}
	removed := old.DeepCopy()
	removed.Finalizers = []string{"example.com/other"}
	if err := p.Validate(context.Background(), attrs(removed, old, "", "operator"), nil); err != nil {
		t.Fatalf("removing a finalizer: %v", err)
	}
	sneaky := removed.DeepCopy()
	sneaky.Status.Holds = []rotation.TrustHeld{{CertificateAuthority: "a"}}
	if err := p.Validate(context.Background(), attrs(sneaky, old, "", "operator"), nil); !apierrors.IsForbidden(err) {
		t.Fatalf("a report along with a finalizer: %v", err)
	}
	labelled := removed.DeepCopy()
	labelled.Labels = map[string]string{"x": "y"}
	if err := p.Validate(context.Background(), attrs(labelled, old, "", "operator"), nil); !apierrors.IsForbidden(err) {
		t.Fatalf("a label along with a finalizer: %v", err)
	}
	notDeleting := old.DeepCopy()
	notDeleting.DeletionTimestamp = nil
	if err := p.Validate(context.Background(), attrs(consumer("gone", "a"), notDeleting, "", "operator"), nil); !apierrors.IsForbidden(err) {
		t.Fatalf("removing finalizers of a live consumer: %v", err)
	}
}

// A failing authorizer refuses.
func TestAuthorizerErrorRefuses(t *testing.T) {
	fake := &admissiontest.Authorizer{T: t, Err: errors.New("webhook down"),
		Grants: []admissiontest.Grant{{User: "syncer", Verb: "trust", Name: "a", Resource: "certificateauthorities"}}}
	if err := newPlugin(t, fake).Validate(context.Background(), attrs(consumer("", "a"), nil, "", "syncer"), nil); !apierrors.IsForbidden(err) {
		t.Fatalf("want 403, got %v", err)
	}
}

// Other resources pass untouched.
func TestOtherResources(t *testing.T) {
	p := newPlugin(t, &admissiontest.Authorizer{T: t})
	a := admission.NewAttributesRecord(&rotation.CertificateAuthority{}, nil, rotation.Kind("CertificateAuthority").WithVersion("v1alpha1"), "", "a",
		rotation.Resource("certificateauthorities").WithVersion("v1alpha1"), "", admission.Create, nil, false, &user.DefaultInfo{Name: "x"})
	if err := p.Validate(context.Background(), a, nil); err != nil {
		t.Fatal(err)
	}
}

// TestANodeHasOneConsumerNamedAfterIt: a node holding trust on every CA
// still registers and reports only for node.<its name>, so it can neither
// take a control-plane consumer's name (not even a node named like it) nor
// register consumers without end; and no one else takes a node's name.
func TestANodeHasOneConsumerNamedAfterIt(t *testing.T) {
	grants := []admissiontest.Grant{
		{User: "system:node:worker-1", Verb: "trust", Name: "a", Resource: "certificateauthorities"},
		{User: "system:node:kube-apiserver", Verb: "trust", Name: "a", Resource: "certificateauthorities"},
		{User: "system:node:kube-apiserver-cp1", Verb: "trust", Name: "a", Resource: "certificateauthorities"},
		{User: "alice", Verb: "trust", Name: "a", Resource: "certificateauthorities"},
	}
	named := func(name, reporter string) *rotation.TrustConsumer {
		tc := consumer(reporter, "a")
		tc.Name = name
		return tc
	}
	node := func(name string, groups ...string) *user.DefaultInfo {
		return &user.DefaultInfo{Name: name, Groups: append(groups, user.AllAuthenticated)}
	}
	attrsAs := func(obj, old *rotation.TrustConsumer, sub string, u user.Info) admission.Attributes {
		op := admission.Create
		var oldObj runtime.Object
		if old != nil {
			op, oldObj = admission.Update, old
		}
		return admission.NewAttributesRecord(obj, oldObj, rotation.Kind("TrustConsumer").WithVersion("v1alpha1"), "", obj.Name,
			rotation.Resource("trustconsumers").WithVersion("v1alpha1"), sub, op, nil, false, u)
	}
	for name, tc := range map[string]struct {
		a     admission.Attributes
		allow bool
		says  string
	}{
		"its own":                    {a: attrsAs(named("node.worker-1", ""), nil, "", node("system:node:worker-1", "system:nodes")), allow: true},
		"its own report":             {a: attrsAs(named("node.worker-1", "system:node:worker-1"), named("node.worker-1", "system:node:worker-1"), "status", node("system:node:worker-1", "system:nodes")), allow: true},
		"its bare name":              {a: attrsAs(named("worker-1", ""), nil, "", node("system:node:worker-1", "system:nodes")), says: `"node.worker-1"`},
		"a control-plane name":       {a: attrsAs(named("kube-apiserver-cp1", ""), nil, "", node("system:node:worker-1", "system:nodes")), says: `"node.worker-1"`},
		"a node named like one":      {a: attrsAs(named("kube-apiserver-cp1", ""), nil, "", node("system:node:kube-apiserver-cp1", "system:nodes")), says: `"node.kube-apiserver-cp1"`},
		"another node's":             {a: attrsAs(named("node.worker-2", ""), nil, "", node("system:node:worker-1", "system:nodes")), says: `"node.worker-1"`},
		"group without a node name":  {a: attrsAs(named("node.worker-1", ""), nil, "", node("worker-1", "system:nodes")), says: "may only"},
		"node-prefixed, not a group": {a: attrsAs(named("kube-apiserver-cp1", ""), nil, "", node("system:node:kube-apiserver")), says: "may only"},
		"a user takes a node's name": {a: attrsAs(named("node.worker-1", ""), nil, "", node("alice")), says: "are for nodes"},
		"a user's own name":          {a: attrsAs(named("kube-apiserver-cp1", ""), nil, "", node("alice")), allow: true},
	} {
		t.Run(name, func(t *testing.T) {
			err := newPlugin(t, &admissiontest.Authorizer{T: t, Grants: grants}).Validate(context.Background(), tc.a, nil)
			if tc.allow != (err == nil) {
				t.Fatalf("allowed %v, want %v (err %v)", err == nil, tc.allow, err)
			}
			if err != nil && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.says)) {
				t.Fatalf("error %v, want a 403 that says %s", err, tc.says)
			}
		})
	}
}
