// Package apiserver assembles rekey's API server from a generic API server
// configuration: Config -> CompletedConfig -> Server.
package apiserver

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/certificates"
	certinstall "rekey.io/rekey/pkg/apis/certificates/install"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/rotation"
	rotationinstall "rekey.io/rekey/pkg/apis/rotation/install"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	csrstorage "rekey.io/rekey/pkg/registry/certificates/certificatesigningrequest"
	signerstorage "rekey.io/rekey/pkg/registry/certificates/signer"
	castorage "rekey.io/rekey/pkg/registry/rotation/certificateauthority"
	"rekey.io/rekey/pkg/serveridentity"
	"rekey.io/rekey/pkg/signing/keystorepaths"
)

var (
	// Scheme holds every type rekey serves.
	Scheme = runtime.NewScheme()
	// Codecs encodes and decodes them.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	certinstall.Install(Scheme)
	rotationinstall.Install(Scheme)

	// Options such as ListOptions and DeleteOptions are registered unversioned
	// so that every group can use them.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
}

// ExtraConfig holds rekey's own configuration.
type ExtraConfig struct {
	// Clock stamps condition times; nil means the real clock.
	Clock clock.PassiveClock
	// ControllerIdentity is the identity the controllers' client carries;
	// only it may write CertificateAuthority and Signer status.
	ControllerIdentity *serveridentity.Identity
	// KeyStorePaths are the PKCS#11 modules and key-store directories a
	// CertificateAuthority may name.
	KeyStorePaths keystorepaths.Allowed
}

// Config is the generic configuration plus rekey's own.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	ExtraConfig   ExtraConfig
}

type completedConfig struct {
	GenericConfig genericapiserver.CompletedConfig
	ExtraConfig   *ExtraConfig
}

// CompletedConfig is a Config whose defaults have been filled in.
type CompletedConfig struct {
	*completedConfig
}

// Server is rekey's API server.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// Complete fills in defaults.
func (cfg *Config) Complete() CompletedConfig {
	c := completedConfig{
		GenericConfig: cfg.GenericConfig.Complete(),
		ExtraConfig:   &cfg.ExtraConfig,
	}
	if c.ExtraConfig.Clock == nil {
		c.ExtraConfig.Clock = clock.RealClock{}
	}
	return CompletedConfig{&c}
}

// New builds the server and installs the API groups.
func (c completedConfig) New() (*Server, error) {
	generic, err := c.GenericConfig.New("rekey-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("creating generic API server: %w", err)
	}
	s := &Server{GenericAPIServer: generic}

	group := genericapiserver.NewDefaultAPIGroupInfo(certificates.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	csr, err := csrstorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter, c.ExtraConfig.Clock)
	if err != nil {
		return nil, fmt.Errorf("creating certificatesigningrequests storage: %w", err)
	}
	signers, signersStatus, err := signerstorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter)
	if err != nil {
		return nil, fmt.Errorf("creating signers storage: %w", err)
	}
	group.VersionedResourcesStorageMap[certv1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"certificatesigningrequests":          csr.CertificateSigningRequest,
		"certificatesigningrequests/status":   csr.Status,
		"certificatesigningrequests/approval": csr.Approval,
		"signers":                             signers,
		"signers/status":                      signersStatus,
	}
	if err := s.GenericAPIServer.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing %s: %w", certificates.GroupName, err)
	}

	rotationGroup := genericapiserver.NewDefaultAPIGroupInfo(rotation.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	cas, casStatus, err := castorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter, c.ExtraConfig.KeyStorePaths)
	if err != nil {
		return nil, fmt.Errorf("creating certificateauthorities storage: %w", err)
	}
	rotationGroup.VersionedResourcesStorageMap[rotationv1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"certificateauthorities":        cas,
		"certificateauthorities/status": casStatus,
	}
	if err := s.GenericAPIServer.InstallAPIGroup(&rotationGroup); err != nil {
		return nil, fmt.Errorf("installing %s: %w", rotation.GroupName, err)
	}
	return s, nil
}
