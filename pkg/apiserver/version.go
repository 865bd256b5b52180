package apiserver

import (
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	basecompatibility "k8s.io/component-base/compatibility"

	"rekey.io/rekey/pkg/version"
)

// EffectiveVersion is the generic server's effective version with /version
// reporting rekey's release and commit (package version), which `kubectl
// version` parses, instead of the Kubernetes libraries' unstamped
// "v0.0.0-master+$Format:%H$", which it refuses. The binary, emulation and
// minimum compatibility versions stay the Kubernetes libraries' own: they
// decide which Kubernetes features and API behaviours the server has.
func EffectiveVersion(kube basecompatibility.EffectiveVersion) basecompatibility.EffectiveVersion {
	return effectiveVersion{EffectiveVersion: kube}
}

type effectiveVersion struct {
	basecompatibility.EffectiveVersion
}

// Info is what /version serves.
func (v effectiveVersion) Info() *apimachineryversion.Info {
	info := version.Get().Kubernetes()
	if kube := v.EffectiveVersion.Info(); kube != nil {
		info.EmulationMajor, info.EmulationMinor = kube.EmulationMajor, kube.EmulationMinor
		info.MinCompatibilityMajor, info.MinCompatibilityMinor = kube.MinCompatibilityMajor, kube.MinCompatibilityMinor
	}
	return &info
}
