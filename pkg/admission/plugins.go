// Package admission lists rekey's admission plugins in the order they run.
package admission

import (
	"k8s.io/apiserver/pkg/admission"

	"rekey.io/rekey/pkg/admission/calegacykeys"
	"rekey.io/rekey/pkg/admission/capublish"
	"rekey.io/rekey/pkg/admission/carotation"
	"rekey.io/rekey/pkg/admission/credentialminter"
	"rekey.io/rekey/pkg/admission/nodeattestationrestriction"
	"rekey.io/rekey/pkg/admission/requestnames"
	"rekey.io/rekey/pkg/admission/signerapproval"
	"rekey.io/rekey/pkg/admission/signerbinding"
	"rekey.io/rekey/pkg/admission/signerhostcluster"
	"rekey.io/rekey/pkg/admission/signerrevocation"
	"rekey.io/rekey/pkg/admission/signersigning"
	"rekey.io/rekey/pkg/admission/signerwarning"
	"rekey.io/rekey/pkg/admission/subjectrestriction"
	"rekey.io/rekey/pkg/admission/trustconsumer"
)

// PluginNames are rekey's plugins, all on by default.
var PluginNames = []string{
	subjectrestriction.PluginName,
	signerapproval.PluginName,
	signersigning.PluginName,
	signerrevocation.PluginName,
	signerbinding.PluginName,
	signerhostcluster.PluginName,
	carotation.PluginName,
	capublish.PluginName,
	calegacykeys.PluginName,
	trustconsumer.PluginName,
	credentialminter.PluginName,
	nodeattestationrestriction.PluginName,
	requestnames.PluginName,
	signerwarning.PluginName,
}

// RegisterAll adds every rekey plugin to a registry.
func RegisterAll(plugins *admission.Plugins) {
	subjectrestriction.Register(plugins)
	signerapproval.Register(plugins)
	signersigning.Register(plugins)
	signerrevocation.Register(plugins)
	signerbinding.Register(plugins)
	signerhostcluster.Register(plugins)
	carotation.Register(plugins)
	capublish.Register(plugins)
	calegacykeys.Register(plugins)
	trustconsumer.Register(plugins)
	credentialminter.Register(plugins)
	nodeattestationrestriction.Register(plugins)
	requestnames.Register(plugins)
	signerwarning.Register(plugins)
}
