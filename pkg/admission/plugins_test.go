package admission

import (
	"testing"

	"k8s.io/apiserver/pkg/admission"
)

// TestEveryPluginIsRegisteredAndListed: RegisterAll and PluginNames agree,
// so no plugin is registered without running or listed without existing.
func TestEveryPluginIsRegisteredAndListed(t *testing.T) {
	plugins := admission.NewPlugins()
	RegisterAll(plugins)
	registered := plugins.Registered()
	if len(registered) != len(PluginNames) {
		t.Fatalf("registered %v, listed %v", registered, PluginNames)
	}
	for _, name := range PluginNames {
		found := false
		for _, r := range registered {
			found = found || r == name
		}
		if !found {
			t.Errorf("%s is listed but not registered", name)
		}
	}
}
