package apiserver

import (
	"fmt"

	"k8s.io/apiserver/pkg/registry/rest"

	"rekey.io/rekey/pkg/authority"
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
