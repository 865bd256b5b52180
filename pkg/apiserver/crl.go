package apiserver

import (
	genericapiserver "k8s.io/apiserver/pkg/server"

	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/crl"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
)

// installCRLs makes, on every replica, the CRL manager (package crl) on
// the replica's Revocations informer and the server's CA-key service,
// serves its CRLs on the public paths (/crl/, without authentication) and
// starts its worker once the server serves. The publisher on the leader
// puts the same CRLs into the CAs' ConfigMaps. It returns nil when the
// server has no public paths.
func (c completedConfig) installCRLs(s *Server, auth *authority.Service, replica informers.SharedInformerFactory) (*crl.Manager, error) {
	if c.ExtraConfig.PublicPaths == nil {
		return nil, nil
	}
	crl.RegisterMetrics()
	m, err := crl.New(crl.Config{
		Keys:        auth.Authorities,
		Revocations: revocationInformer(replica).Informer(),
		Validity:    c.ExtraConfig.CRLValidity,
	})
	if err != nil {
		return nil, err
	}
	c.ExtraConfig.PublicPaths.Handle(crl.PathPrefix, m.Handler())
	err = s.GenericAPIServer.AddPostStartHook("rekey-crls", func(hook genericapiserver.PostStartHookContext) error {
		s.goBackground(func() { m.Run(hook) })
		return nil
	})
	return m, err
}
