package apiserver

import (
	"errors"
	"net/http"

	"k8s.io/apiserver/pkg/server/healthz"

	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/revocation"
)

// installRevocationEnforcement fills the revoked set the options made (and
// wrapped the authenticator with) from the replica's Revocations informer,
// serves the authorization webhook kube-apiserver asks, without
// authentication, on the public paths, and adds a readiness check that
// fails until the set has loaded: a replica that cannot tell revoked
// certificates yet answers the webhook 503, and behind a Service should
// not be sent its calls.
func (c completedConfig) installRevocationEnforcement(s *Server, replica informers.SharedInformerFactory) error {
	set := c.ExtraConfig.Revocations
	if set == nil {
		return nil
	}
	if err := set.Watch(revocationInformer(replica).Informer()); err != nil {
		return err
	}
	c.ExtraConfig.PublicPaths.Handle(revocation.Path, revocation.NewWebhook(set))
	return s.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("rekey-revocations", func(*http.Request) error {
		if !set.HasSynced() {
			return errors.New("the Revocations are not loaded yet")
		}
		return nil
	}))
}
