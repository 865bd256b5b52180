package apiserver

import (
	"fmt"

	"k8s.io/apiserver/pkg/registry/rest"

	"rekey.io/rekey/pkg/authority"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	revocationstorage "rekey.io/rekey/pkg/registry/certificates/revocation"
)

// newRevocations is the Revocation storage: a create finds its certificate
// in the server's issuance records (the recorder auth.Records is).
func (c completedConfig) newRevocations(records authority.Records) (rest.Storage, error) {
	lookup, ok := records.(revocationstorage.Records)
	if !ok {
		return nil, fmt.Errorf("the issuance records (%T) cannot find a certificate to revoke", records)
	}
	s, err := revocationstorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter, lookup, c.ExtraConfig.Clock)
	if err != nil {
		return nil, fmt.Errorf("creating revocations storage: %w", err)
	}
	return s, nil
}

// revocationInformer is the replica's informer on Revocations, which the
// controllers borrow: made here, before the replica factory starts (an
// informer first asked for later would never run).
func revocationInformer(replica informers.SharedInformerFactory) certinformers.RevocationInformer {
	i := replica.Certificates().V1alpha1().Revocations()
	i.Informer()
	return i
}
