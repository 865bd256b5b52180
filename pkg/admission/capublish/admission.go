// Package capublish keeps spec.publish of a CertificateAuthority from
// making rekey a confused deputy. rekey writes the published bundles with
// its own identity in the host cluster, so whoever sets where they go must
// be allowed to write there themselves: create on configmaps in each
// listed namespace (in every namespace for a selector), and create on
// clustertrustbundles for ClusterTrustBundles.
package capublish

import (
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/apis/rotation"
)

// PluginName is the name to enable the plugin with.
const PluginName = "CertificateAuthorityPublish"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks the permissions behind spec.publish.
type Plugin struct {
	*admission.Handler
	authorizer authorizer.Authorizer
}

var (
	_ admission.ValidationInterface        = &Plugin{}
	_ admission.InitializationValidator    = &Plugin{}
	_ genericadmissioninit.WantsAuthorizer = &Plugin{}
)

// New returns a plugin that still needs an authorizer.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// SetAuthorizer is called by the admission initializer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// ValidateInitialization refuses to start without an authorizer.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil {
		return fmt.Errorf("%s admission plugin requires an authorizer", PluginName)
	}
	return nil
}

// Validate checks a changed spec.publish against the user's own rights:
// what it adds needs create, what it takes away (rekey deletes the bundles
// a CA no longer asks for, and those of a deleted CA) needs delete.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != rotation.Resource("certificateauthorities") || a.GetSubresource() != "" {
		return nil
	}
	var publish, oldPublish *rotation.Publish
	var ca, old *rotation.CertificateAuthority
	if a.GetOperation() != admission.Delete {
		var ok bool
		if ca, ok = a.GetObject().(*rotation.CertificateAuthority); !ok {
			return admission.NewForbidden(a, fmt.Errorf("expected a CertificateAuthority, got %T", a.GetObject()))
		}
		publish = ca.Spec.Publish
	}
	if o, ok := a.GetOldObject().(*rotation.CertificateAuthority); ok {
		old, oldPublish = o, o.Spec.Publish
	}
	// Ways to have the CA deleted without a Delete this plugin sees: an
	// owner reference added (the garbage collector, which may delete
	// anything, deletes the CA once it finds the owner missing), or a
	// finalizer removed from a CA already being deleted (the update then
	// deletes it). Either takes everything published away.
	if ca != nil && old != nil && oldPublish != nil && (ownerAdded(old, ca) || ca.DeletionTimestamp != nil && len(ca.Finalizers) < len(old.Finalizers)) {
		publish = nil
	}
	if equality.Semantic.DeepEqual(oldPublish, publish) {
		return nil // unchanged: checked when it was set
	}
	u := a.GetUserInfo()
	if u == nil {
		return admission.NewForbidden(a, errors.New("no user information on the request"))
	}
	check := func(attrs authorizer.AttributesRecord, what string) error {
		attrs.User, attrs.ResourceRequest, attrs.APIVersion = u, true, "*"
		decision, _, _ := p.authorizer.Authorize(ctx, attrs)
		if decision == authorizer.DecisionAllow {
			return nil
		}
		return admission.NewForbidden(a, fmt.Errorf("spec.publish makes rekey %s; user %q may not do that itself", what, u.GetName()))
	}
	if err := checkRemoved(oldPublish, publish, check); err != nil {
		return err
	}
	if ca != nil && old == nil && len(ca.OwnerReferences) > 0 {
		// Created with an owner: the garbage collector deletes it, and
		// rekey what it published, when the owner goes.
		if err := checkRemoved(ca.Spec.Publish, nil, check); err != nil {
			return err
		}
	}
	if ca == nil || ca.Spec.Publish == nil || equality.Semantic.DeepEqual(oldPublish, ca.Spec.Publish) {
		return nil
	}
	publish = ca.Spec.Publish
	if cm := publish.ConfigMaps; cm != nil {
		for _, ns := range cm.Namespaces {
			if err := check(authorizer.AttributesRecord{Verb: "create", Resource: "configmaps", Namespace: ns}, fmt.Sprintf("write ConfigMaps in namespace %q (needs create on configmaps there)", ns)); err != nil {
				return err
			}
		}
		if cm.NamespaceSelector != nil {
			if err := check(authorizer.AttributesRecord{Verb: "create", Resource: "configmaps"}, "write ConfigMaps in namespaces picked by a selector (needs create on configmaps in all namespaces)"); err != nil {
				return err
			}
		}
	}
	if publish.ClusterTrustBundle {
		if err := check(authorizer.AttributesRecord{Verb: "create", APIGroup: "certificates.k8s.io", Resource: "clustertrustbundles"}, "write ClusterTrustBundles (needs create on clustertrustbundles)"); err != nil {
			return err
		}
	}
	return nil
}

// checkRemoved asks for delete rights on what the change from old to cur
// takes away (cur nil: the CA is deleted or stops publishing), since the
// publisher then deletes it.
func checkRemoved(old, cur *rotation.Publish, check func(authorizer.AttributesRecord, string) error) error {
	if old == nil {
		return nil
	}
	if oldCM := old.ConfigMaps; oldCM != nil {
		var curCM *rotation.ConfigMapPublish
		if cur != nil {
			curCM = cur.ConfigMaps
		}
		// A new name, or no ConfigMaps at all, removes every old one; a
		// changed or dropped selector may remove any namespace's.
		all := curCM == nil || curCM.Name != oldCM.Name
		if oldCM.NamespaceSelector != nil && (all || !equality.Semantic.DeepEqual(oldCM.NamespaceSelector, curCM.NamespaceSelector)) {
			if err := check(authorizer.AttributesRecord{Verb: "delete", Resource: "configmaps"}, "delete ConfigMaps in namespaces a selector picked (needs delete on configmaps in all namespaces)"); err != nil {
				return err
			}
		}
		kept := map[string]bool{}
		if !all {
			for _, ns := range curCM.Namespaces {
				kept[ns] = true
			}
		}
		for _, ns := range oldCM.Namespaces {
			if kept[ns] {
				continue
			}
			if err := check(authorizer.AttributesRecord{Verb: "delete", Resource: "configmaps", Namespace: ns}, fmt.Sprintf("delete the ConfigMap it published in namespace %q (needs delete on configmaps there)", ns)); err != nil {
				return err
			}
		}
	}
	if old.ClusterTrustBundle && (cur == nil || !cur.ClusterTrustBundle) {
		if err := check(authorizer.AttributesRecord{Verb: "delete", APIGroup: "certificates.k8s.io", Resource: "clustertrustbundles"}, "delete the ClusterTrustBundles it published (needs delete on clustertrustbundles)"); err != nil {
			return err
		}
	}
	return nil
}

// ownerAdded reports an owner reference the new object has and the old
// one had not.
func ownerAdded(old, cur *rotation.CertificateAuthority) bool {
	had := map[string]bool{}
	for _, r := range old.OwnerReferences {
		had[string(r.UID)] = true
	}
	for _, r := range cur.OwnerReferences {
		if !had[string(r.UID)] {
			return true
		}
	}
	return false
}
