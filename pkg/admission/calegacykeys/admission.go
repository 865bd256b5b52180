// Package calegacykeys keeps spec.serviceAccountTokens.legacyPublicKeys of
// a CertificateAuthority from being a way around signjwt. kube-apiserver
// accepts every token a legacy key signs, for any service account, until
// the entry's expireTime (rekey-agent jwt-signer serves the key with
// exclude_from_oidc_discovery, so it does not even show in
// /openid/v1/jwks): whoever adds a key of their own there mints tokens as
// surely as whoever may sign. So adding a key (a kid the stored object
// does not list; every key on create) or serving one longer (a later
// expireTime) needs what signing needs: verb "create" on
// certificateauthorities/signjwt (group rotation.rekey.io) with the CA's
// name. Removing a key or serving it for less time stays free: it only
// takes trust away.
package calegacykeys

import (
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/admission/caauthz"
	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/jwtkey"
)

// PluginName is the name to enable the plugin with.
const PluginName = "CertificateAuthorityLegacyTokenKeys"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks who adds or extends legacy service-account token keys.
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
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
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

// Validate checks a create or update of a CertificateAuthority (its
// status too: the status strategy keeps the stored spec, and should it
// ever not, a key added there is checked all the same).
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != rotation.Resource("certificateauthorities") {
		return nil
	}
	if sub := a.GetSubresource(); sub != "" && sub != "status" {
		return nil // rotate and signjwt carry no CertificateAuthority
	}
	ca, ok := a.GetObject().(*rotation.CertificateAuthority)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a CertificateAuthority, got %T", a.GetObject()))
	}
	var oldKeys []rotation.LegacyPublicKey
	if a.GetOperation() == admission.Update {
		old, ok := a.GetOldObject().(*rotation.CertificateAuthority)
		if !ok {
			return admission.NewForbidden(a, fmt.Errorf("expected the stored CertificateAuthority, got %T", a.GetOldObject()))
		}
		oldKeys = legacyKeys(old)
	}
	what := widened(oldKeys, legacyKeys(ca))
	if what == "" {
		return nil
	}
	u := a.GetUserInfo()
	if u == nil {
		return admission.NewForbidden(a, errors.New("no user information on the request"))
	}
	return p.requireSignJWT(ctx, a, u, ca.Name, what)
}

func legacyKeys(ca *rotation.CertificateAuthority) []rotation.LegacyPublicKey {
	if ca.Spec.ServiceAccountTokens == nil {
		return nil
	}
	return ca.Spec.ServiceAccountTokens.LegacyPublicKeys
}

// widened describes the first way cur trusts more than old does: a key
// old does not list, or one served until later. Keys are compared by kid
// (the same key in PKIX or PKCS#1 form is one key); a key that does not
// parse (validation refuses it before admission runs) counts as added.
func widened(old, cur []rotation.LegacyPublicKey) string {
	had := map[string]rotation.LegacyPublicKey{}
	for _, k := range old {
		if kid, ok := keyID(k); ok {
			had[kid] = k
		}
	}
	for i, k := range cur {
		kid, ok := keyID(k)
		if !ok {
			return fmt.Sprintf("adds a key (spec.serviceAccountTokens.legacyPublicKeys[%d], which does not parse)", i)
		}
		prev, ok := had[kid]
		if !ok {
			return fmt.Sprintf("adds a key (spec.serviceAccountTokens.legacyPublicKeys[%d], kid %s)", i, kid)
		}
		if k.ExpireTime.After(prev.ExpireTime.Time) {
			return fmt.Sprintf("serves a key longer (spec.serviceAccountTokens.legacyPublicKeys[%d], kid %s, expireTime %s, was %s)",
				i, kid, k.ExpireTime.UTC().Format("2006-01-02T15:04:05Z"), prev.ExpireTime.UTC().Format("2006-01-02T15:04:05Z"))
		}
	}
	return ""
}

func keyID(k rotation.LegacyPublicKey) (string, bool) {
	pub, err := jwtkey.ParsePublicKeyPEM(k.PublicKey)
	if err != nil {
		return "", false
	}
	kid, err := jwtkey.KeyID(pub)
	return kid, err == nil
}

// requireSignJWT refuses unless u may create certificateauthorities/signjwt
// on the CA. An authorizer error refuses too: such a key lets its holder
// in as any service account.
func (p *Plugin) requireSignJWT(ctx context.Context, a admission.Attributes, u user.Info, ca, what string) error {
	decision, err := caauthz.Authorize(ctx, p.authorizer, u, "create", caauthz.SubresourceSignJWT, ca)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Legacy token key authorization check failed", "plugin", PluginName, "user", u.GetName(), "certificateAuthority", ca)
	}
	return admission.NewForbidden(a, fmt.Errorf("user %q may not change CertificateAuthority %q this way: the change %s, and kube-apiserver accepts every service-account token a legacy public key signs until its expireTime, which is as strong as signing; it needs verb \"create\" on \"certificateauthorities/signjwt\" in group %q with resourceName %q (removing a key or shortening its expireTime needs nothing more)",
		u.GetName(), ca, what, rotation.GroupName, ca))
}
