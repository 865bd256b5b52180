package apiserver

import (
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/revocation"
)

// installRevocationEnforcement fills the revoked set the options made (and
// wrapped the authenticator with) from the replica's Revocations informer,
// and serves the authorization webhook kube-apiserver asks, without
// authentication, on the public paths.
func (c completedConfig) installRevocationEnforcement(replica informers.SharedInformerFactory) error {
	set := c.ExtraConfig.Revocations
	if set == nil {
		return nil
	}
	if err := set.Watch(revocationInformer(replica).Informer()); err != nil {
		return err
	}
	c.ExtraConfig.PublicPaths.Handle(revocation.Path, revocation.NewWebhook(set))
	return nil
}
