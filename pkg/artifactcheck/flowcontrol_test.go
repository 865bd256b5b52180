package artifactcheck

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
)

// TestJWTSignerFlowSchema: every TokenRequest kube-apiserver serves waits
// on one signjwt, so signjwt must neither share global-default with every
// user (a busy user would starve token issuance) nor the priority level of
// the TokenRequests it serves (they would hold the seats it waits for).
// artifacts/rbac installs a FlowSchema for the signers' group (their
// certificates carry O=rekey:jwt-signers) and a Limited priority level of
// its own, with queuing.
func TestJWTSignerFlowSchema(t *testing.T) {
	objects := installed(t)
	var fs flowcontrolv1.FlowSchema
	decode(t, objects, "FlowSchema/rekey-jwt-signer", &fs)
	var pl flowcontrolv1.PriorityLevelConfiguration
	decode(t, objects, "PriorityLevelConfiguration/rekey-jwt-signer", &pl)
	if fs.APIVersion != "flowcontrol.apiserver.k8s.io/v1" || pl.APIVersion != "flowcontrol.apiserver.k8s.io/v1" {
		t.Errorf("apiVersions %s, %s: want flowcontrol.apiserver.k8s.io/v1 (served by kube-apiserver 1.29 on)", fs.APIVersion, pl.APIVersion)
	}
	if fs.Spec.PriorityLevelConfiguration.Name != pl.Name {
		t.Errorf("FlowSchema level %q, want %q", fs.Spec.PriorityLevelConfiguration.Name, pl.Name)
	}
	// global-default is 9900, catch-all 10000: a schema at or after them
	// never matches a signer.
	if p := fs.Spec.MatchingPrecedence; p <= 0 || p >= 9900 {
		t.Errorf("matchingPrecedence %d: want before global-default's 9900", p)
	}
	if d := fs.Spec.DistinguisherMethod; d == nil || d.Type != flowcontrolv1.FlowDistinguisherMethodByUserType {
		t.Errorf("distinguisher %+v: want ByUser (one flow per control-plane host)", d)
	}
	var subject, signjwt bool
	for _, r := range fs.Spec.Rules {
		for _, s := range r.Subjects {
			subject = subject || s.Kind == flowcontrolv1.SubjectKindGroup && s.Group != nil && s.Group.Name == "rekey:jwt-signers"
		}
		for _, rr := range r.ResourceRules {
			signjwt = signjwt || slices.Contains(rr.Verbs, "create") && slices.Contains(rr.APIGroups, "rotation.rekey.io") &&
				slices.Contains(rr.Resources, "certificateauthorities/signjwt") && rr.ClusterScope
		}
	}
	if !subject || !signjwt {
		t.Errorf("FlowSchema rules %+v: want group rekey:jwt-signers creating certificateauthorities/signjwt", fs.Spec.Rules)
	}
	lim := pl.Spec.Limited
	if pl.Spec.Type != flowcontrolv1.PriorityLevelEnablementLimited || lim == nil {
		t.Fatalf("priority level %+v: want Limited", pl.Spec)
	}
	if lim.NominalConcurrencyShares == nil || *lim.NominalConcurrencyShares < 10 {
		t.Errorf("nominalConcurrencyShares %v: want at least 10", lim.NominalConcurrencyShares)
	}
	if lim.LimitResponse.Type != flowcontrolv1.LimitResponseTypeQueue || lim.LimitResponse.Queuing == nil {
		t.Errorf("limitResponse %+v: want Queue", lim.LimitResponse)
	}
	if strings.Contains(fmt.Sprint(fs.Spec.Rules), "global-default") {
		t.Error("the FlowSchema names global-default")
	}
}
